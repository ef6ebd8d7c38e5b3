package scheduler

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"downloader"
	"downloader/engine"
)

// answerTransport answers every call with status and body, without a network.
type answerTransport struct {
	status int
	body   string
}

func (a answerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	return &http.Response{StatusCode: a.status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(a.body)), Request: req}, nil
}

// FuzzLease: whatever the scheduler answers to a lease, the client never panics; it
// returns tasks that each carry a task_id, or an error of the contract's codes; and every
// task it returns either validates or is an invalid task the engine reports as such.
func FuzzLease(f *testing.F) {
	for _, s := range []string{
		`{"tasks":[]}`,
		`{"tasks":[{"task_id":"t1","url":"http://a.test/","domain":"a.test","min_interval_ms":500,"should_render":true,"should_store":true,"lease_expires_at":"2026-08-15T07:10:00Z"}]}`,
		`{"tasks":[{"task_id":"t1","url":5,"min_interval_ms":"x","should_render":"yes","lease_expires_at":"soon"}]}`,
		`{"tasks":[{"url":"http://a.test/"},{"task_id":""},{"task_id":7},null,1,"x",[]]}`,
		`{"tasks":[{"task_id":"t1","min_interval_ms":1e99}]}`,
		`{"tasks":[{"task_id":"t1","min_interval_ms":null,"url":null}]}`,
		`{"tasks":null}`, `{"tasks":{}}`, `[]`, `null`, ``, `{`, `{"tasks":[{"task_id":"t1"}]} trailing`,
	} {
		f.Add(200, s)
	}
	f.Add(500, `{"error":"down"}`)
	f.Add(404, ``)
	f.Add(429, `{}`)
	f.Fuzz(func(t *testing.T, status int, body string) {
		if status < 100 || status > 999 {
			status = 200
		}
		c, err := New(Config{URL: "http://scheduler.test", HTTPClient: &http.Client{Transport: answerTransport{status, body}}})
		if err != nil {
			t.Fatal(err)
		}
		tasks, err := c.Lease(context.Background(), "w1", 10)
		if err != nil {
			switch downloader.ErrorCode(err) {
			case downloader.EINVALID, downloader.ENOTFOUND, downloader.EUNAVAILABLE:
			default:
				t.Fatalf("Lease error %v with code %q", err, downloader.ErrorCode(err))
			}
			if tasks != nil {
				t.Fatalf("tasks %v with an error", tasks)
			}
			return
		}
		for _, task := range tasks {
			if task.TaskID == "" {
				t.Fatalf("a task without a task_id: %+v", task)
			}
			if _, _, err := engine.ValidateTask(&task); err != nil && downloader.ErrorCode(err) != downloader.EINVALID {
				t.Fatalf("ValidateTask(%+v): %v, want valid or EINVALID", task, err)
			}
		}
	})
}

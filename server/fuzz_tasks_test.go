package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"downloader"
	"downloader/localqueue"
)

// memQueue checks tasks as the embedded queue does and keeps them in memory.
type memQueue struct {
	mu   sync.Mutex
	urls map[string]bool
}

func (q *memQueue) CheckTask(t downloader.Task) error {
	_, err := localqueue.CheckTask(t, time.Second, downloader.HeaderPolicy{})
	return err
}

func (q *memQueue) TaskStatus(context.Context, string) (*downloader.TaskStatus, error) {
	return nil, downloader.Errorf(downloader.ENOTFOUND, "not kept")
}

func (q *memQueue) ListTasks(context.Context, downloader.TaskState, string, int) ([]downloader.TaskStatus, string, error) {
	return nil, "", nil
}

func (q *memQueue) SubmitTasks(_ context.Context, tasks []downloader.Task) ([]TaskSubmission, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]TaskSubmission, len(tasks))
	for i, t := range tasks {
		if _, err := localqueue.CheckTask(t, time.Second, downloader.HeaderPolicy{}); err != nil {
			return nil, err // the handler handed over a task that did not pass CheckTask
		}
		out[i] = TaskSubmission{TaskID: t.TaskID, URL: t.URL, IsDuplicate: q.urls[t.URL], State: "queued"}
		q.urls[t.URL] = true
	}
	return out, nil
}

// FuzzSubmitTasks: any body to POST /v1/tasks gets a JSON answer: 201 or 200 accounting
// for every task, or a 400 naming the field (as in tasks[3].url); never a panic or a 500.
func FuzzSubmitTasks(f *testing.F) {
	for _, s := range []string{
		`{"tasks":[{"url":"http://a.test/"}]}`,
		`{"tasks":[{"url":"http://a.test/","task_id":"t1","domain":"A.TEST","min_interval_ms":250,"should_render":true,"should_store":false}]}`,
		`{"tasks":[{"url":"http://a.test/"},{"url":"http://a.test/"}]}`,
		`{"tasks":[{"url":"http://a.test/"},{"url":"ftp://b.test/"}]}`,
		`{"tasks":[{"url":"http://a.test/","lease_expires_at":"2030-01-01T00:00:00Z"}]}`,
		`{"tasks":[{"url":"http://a.test/","min_interval_ms":3600001}]}`,
		`{"tasks":[{"url":"http://a.test/","task_id":"` + strings.Repeat("x", 200) + `"}]}`,
		`{"tasks":[null]}`, `{"tasks":[1]}`, `{"tasks":[[]]}`, `{"tasks":null}`, `{"tasks":{}}`, `{}`, `[]`, ``,
		`{"tasks":[{"":1}]}`, `{"tasks":[{"url":"http://a.test/"}]}{}`,
	} {
		f.Add(s)
	}
	h := newHarness(f, &fakeFetcher{})
	h.srv = New(Config{Probe: h.eng, Render: h.eng, Settings: h.eng, Domains: h.lim, Slots: h.gate, Clock: h.clk, Tasks: &memQueue{urls: map[string]bool{}}})
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/tasks", strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, req)
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("content type %q", ct)
		}
		switch rec.Code {
		case http.StatusOK, http.StatusCreated:
			var res submitResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
				t.Fatalf("answer %s: %v", rec.Body.String(), err)
			}
			if res.QueuedCount+res.DuplicateCount != len(res.Tasks) {
				t.Fatalf("counts do not add up: %s", rec.Body.String())
			}
			if (rec.Code == http.StatusCreated) != (res.QueuedCount > 0) {
				t.Fatalf("status %d with queued_count %d", rec.Code, res.QueuedCount)
			}
		case http.StatusBadRequest:
			var e errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Field == "" {
				t.Fatalf("400 without a field: %s", rec.Body.String())
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
	})
}

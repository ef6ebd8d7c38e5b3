package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"downloader"
	"downloader/internal/testkit"
	"downloader/localqueue"
	"downloader/server"
	"downloader/store/embedded"
)

// api is the downloader's HTTP API in front of a rig, on a real listener on 127.0.0.1.
type api struct {
	base   string
	client *http.Client
}

// serveAPI serves r's engine (and, when q is set, POST /v1/tasks on it) until t ends.
func serveAPI(t *testing.T, r *rig, q *localqueue.Queue) *api {
	t.Helper()
	cfg := server.Config{Probe: r.engine, Render: r.engine, Settings: r.engine, Domains: r.lim, Slots: r.gate, Guard: r.guard}
	if q != nil {
		cfg.Tasks = queueAdapter{q}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: server.New(cfg), ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.Serve(ln)
	}()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		hs.Close()
		<-done
	})
	return &api{base: "http://" + ln.Addr().String(), client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// post sends body to path and returns the status, the Retry-After header and the JSON
// answer.
func (a *api) post(t *testing.T, path string, body []byte) (int, string, map[string]any) {
	t.Helper()
	resp, err := a.client.Post(a.base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return 0, "", nil
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Errorf("POST %s: %d answer is not a JSON object: %v", path, resp.StatusCode, err)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), m
}

// queueAdapter serves POST /v1/tasks from the embedded queue (as cmd/downloader does).
type queueAdapter struct{ q *localqueue.Queue }

func (a queueAdapter) CheckTask(t downloader.Task) error {
	_, err := localqueue.CheckTask(t, time.Second, downloader.HeaderPolicy{})
	return err
}

func (a queueAdapter) TaskStatus(ctx context.Context, taskID string) (*downloader.TaskStatus, error) {
	return a.q.TaskStatus(ctx, taskID)
}

func (a queueAdapter) ListTasks(ctx context.Context, state downloader.TaskState, cursor string, limit int) ([]downloader.TaskStatus, string, error) {
	return a.q.ListTasks(ctx, state, cursor, limit)
}

func (a queueAdapter) SubmitTasks(ctx context.Context, tasks []downloader.Task) ([]server.TaskSubmission, error) {
	res, err := a.q.Submit(ctx, tasks)
	if err != nil {
		return nil, err
	}
	out := make([]server.TaskSubmission, len(res))
	for i, r := range res {
		out[i] = server.TaskSubmission{TaskID: r.TaskID, URL: r.URL, IsDuplicate: r.IsDuplicate, State: r.State}
	}
	return out, nil
}

// TestHostileCallerInput is the hostile-caller check for what a caller sends: bodies over the limit,
// bad JSON and every field at its edge values, through the real HTTP server. Each answer
// is the right status naming the field; a refused request leaves no trace in the limiter;
// and the service answers normally afterwards.
func TestHostileCallerInput(t *testing.T) {
	noLeaks(t)
	r := newRig(t, rigConfig{})
	st, err := embedded.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q, err := localqueue.Open(t.Context(), st, localqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a := serveAPI(t, r, q)

	url8192 := "http://edge.test/" + strings.Repeat("a", 8192-len("http://edge.test/"))
	nested := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	tasks := func(n int) []byte {
		var b strings.Builder
		b.WriteString(`{"tasks":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"url":"http://t%d.test/"}`, i)
		}
		b.WriteString(`]}`)
		return []byte(b.String())
	}
	tests := []struct {
		name   string
		path   string
		body   string
		raw    []byte // instead of body
		status int
		field  string // of a 400
	}{
		// Bodies over the limit.
		{name: "body of 1 MiB + 1 byte", path: "/v1/probe", raw: overLimitBody(1<<20 + 1), status: 400, field: "body"},
		{name: "body of 8 MiB", path: "/v1/render", raw: overLimitBody(8 << 20), status: 400, field: "body"},
		{name: "10001 tasks at once", path: "/v1/tasks", raw: tasks(10_001), status: 400, field: "tasks"},
		// Bad JSON.
		{name: "empty", path: "/v1/probe", body: ``, status: 400, field: "body"},
		{name: "not JSON", path: "/v1/probe", body: `<xml/>`, status: 400, field: "body"},
		{name: "truncated", path: "/v1/render", body: `{"url":"http://a.test/"`, status: 400, field: "body"},
		{name: "null", path: "/v1/probe", body: `null`, status: 400, field: "url"},
		{name: "array", path: "/v1/probe", body: `[{"url":"http://a.test/"}]`, status: 400, field: "body"},
		{name: "two objects", path: "/v1/probe", body: `{"url":"http://a.test/"}{"url":"http://b.test/"}`, status: 400, field: "body"},
		// Strict decoding (httpjson.Unmarshal) meets the unknown outer member before the depth.
		{name: "nested 20000 deep", path: "/v1/probe", body: nested, status: 400, field: "a"},
		// JSON is UTF-8 (RFC 8259 §8.1): invalid UTF-8 anywhere is a malformed body.
		{name: "invalid UTF-8 in the host", path: "/v1/probe", raw: []byte("{\"url\":\"http://a\xff\xfe.test/\"}"), status: 400, field: "body"},
		{name: "invalid UTF-8 in the path", path: "/v1/probe", raw: []byte("{\"url\":\"http://edge8.test/\xff\xfe\"}"), status: 400, field: "body"},
		{name: "unknown field", path: "/v1/probe", body: `{"url":"http://a.test/","reached":true}`, status: 400, field: "reached"},
		{name: "wrong type", path: "/v1/probe", body: `{"url":"http://a.test/","should_render":"yes"}`, status: 400, field: "should_render"},
		{name: "tasks not a list", path: "/v1/tasks", body: `{"tasks":{"url":"http://a.test/"}}`, status: 400, field: "tasks"},
		{name: "a task with a lease", path: "/v1/tasks", body: `{"tasks":[{"url":"http://a.test/","lease_expires_at":"2030-01-01T00:00:00Z"}]}`, status: 400, field: "tasks[0].lease_expires_at"},
		// min_interval_ms at its edges.
		{name: "min_interval_ms 0", path: "/v1/probe", body: `{"url":"http://edge0.test/","min_interval_ms":0}`, status: 200},
		{name: "min_interval_ms one hour", path: "/v1/probe", body: `{"url":"http://edge1.test/","min_interval_ms":3600000}`, status: 200},
		{name: "min_interval_ms one hour + 1", path: "/v1/probe", body: `{"url":"http://edge2.test/","min_interval_ms":3600001}`, status: 400, field: "min_interval_ms"},
		{name: "min_interval_ms -1", path: "/v1/probe", body: `{"url":"http://edge2.test/","min_interval_ms":-1}`, status: 400, field: "min_interval_ms"},
		{name: "min_interval_ms 2^63", path: "/v1/probe", body: `{"url":"http://edge2.test/","min_interval_ms":9223372036854775808}`, status: 400, field: "min_interval_ms"},
		{name: "min_interval_ms 1.5", path: "/v1/probe", body: `{"url":"http://edge2.test/","min_interval_ms":1.5}`, status: 400, field: "min_interval_ms"},
		{name: "min_interval_ms 1e3", path: "/v1/probe", body: `{"url":"http://edge2.test/","min_interval_ms":1e3}`, status: 400, field: "min_interval_ms"},
		{name: "min_interval_ms null is the default", path: "/v1/probe", body: `{"url":"http://edge3.test/","min_interval_ms":null}`, status: 200},
		{name: "task min_interval_ms one hour + 1", path: "/v1/tasks", body: `{"tasks":[{"url":"http://a.test/","min_interval_ms":3600001}]}`, status: 400, field: "tasks[0].min_interval_ms"},
		// timeout_ms at its edges.
		{name: "timeout_ms 0", path: "/v1/render", body: `{"url":"http://edge2.test/","should_render":false,"timeout_ms":0}`, status: 400, field: "timeout_ms"},
		{name: "timeout_ms 1", path: "/v1/render", body: `{"url":"http://edge4.test/","should_render":false,"timeout_ms":1}`, status: 200},
		{name: "timeout_ms 300000", path: "/v1/render", body: `{"url":"http://edge5.test/","should_render":false,"timeout_ms":300000}`, status: 200},
		{name: "timeout_ms 300001", path: "/v1/render", body: `{"url":"http://edge2.test/","should_render":false,"timeout_ms":300001}`, status: 400, field: "timeout_ms"},
		// url at its edges.
		{name: "url of 8192 bytes", path: "/v1/probe", body: `{"url":"` + url8192 + `"}`, status: 200},
		{name: "url of 8193 bytes", path: "/v1/probe", body: `{"url":"` + url8192 + `a"}`, status: 400, field: "url"},
		{name: "url with an IDN host", path: "/v1/probe", body: `{"url":"http://bücher.test/"}`, status: 200},
		{name: "url not http", path: "/v1/probe", body: `{"url":"file:///etc/passwd"}`, status: 400, field: "url"},
		{name: "url gopher", path: "/v1/probe", body: `{"url":"gopher://a.test/"}`, status: 400, field: "url"},
		{name: "url with credentials", path: "/v1/probe", body: `{"url":"http://user:pw@a.test/"}`, status: 400, field: "url"},
		{name: "url port 0", path: "/v1/probe", body: `{"url":"http://a.test:0/"}`, status: 400, field: "url"},
		{name: "url port 65536", path: "/v1/probe", body: `{"url":"http://a.test:65536/"}`, status: 400, field: "url"},
		{name: "url names loopback", path: "/v1/probe", body: `{"url":"http://127.0.0.1:8080/"}`, status: 400, field: "url"},
		{name: "url names loopback as a number", path: "/v1/probe", body: `{"url":"http://2130706433/"}`, status: 400, field: "url"},
		{name: "url names IPv6 loopback", path: "/v1/render", body: `{"url":"http://[::1]/"}`, status: 400, field: "url"},
		{name: "url names the metadata address", path: "/v1/probe", body: `{"url":"http://169.254.169.254/latest/meta-data/"}`, status: 400, field: "url"},
		{name: "url names a private address", path: "/v1/render", body: `{"url":"http://10.0.0.5/"}`, status: 400, field: "url"},
		{name: "url names localhost", path: "/v1/probe", body: `{"url":"http://localhost/"}`, status: 400, field: "url"},
		{name: "url host 254 characters", path: "/v1/probe", body: `{"url":"http://` + strings.Repeat("a.", 125) + `test/"}`, status: 400, field: "url"},
		// domain at its edges.
		{name: "domain upper case with a dot and port", path: "/v1/probe", body: `{"url":"http://edge6.test/","domain":"EDGE6.TEST.:80"}`, status: 200},
		{name: "domain not the host", path: "/v1/render", body: `{"url":"http://a.test/","domain":"b.test"}`, status: 400, field: "domain"},
		{name: "domain a parent of the host", path: "/v1/probe", body: `{"url":"http://www.a.test/","domain":"a.test"}`, status: 400, field: "domain"},
		{name: "domain empty is the host", path: "/v1/probe", body: `{"url":"http://edge7.test/","domain":""}`, status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.raw
			if body == nil {
				body = []byte(tt.body)
			}
			status, _, m := a.post(t, tt.path, body)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %v", status, tt.status, m)
			}
			if tt.status == 400 && m["field"] != tt.field {
				t.Errorf("400 names field %v, want %q: %v", m["field"], tt.field, m["error"])
			}
		})
	}
	// A refused request left nothing in the limiter; the ones answered 200 did.
	if _, ok := r.lim.Domain(time.Now(), "edge2.test"); ok {
		t.Error("refused requests to edge2.test left a limiter entry")
	}
	if _, ok := r.lim.Domain(time.Now(), "edge0.test"); !ok {
		t.Error("the accepted request to edge0.test left no limiter entry")
	}
	// Nothing queued by the refused submissions.
	if c := q.Counts(); c.TotalCount() != 0 {
		t.Errorf("the queue holds %d tasks after refused submissions", c.TotalCount())
	}
	// The service still answers.
	if status, _, m := a.post(t, "/v1/probe", []byte(`{"url":"http://after.test/"}`)); status != 200 || m["fail_reason"] != nil {
		t.Errorf("after the hostile input: %d %v", status, m)
	}
}

// overLimitBody is a valid JSON probe request of n bytes.
func overLimitBody(n int) []byte {
	head := `{"url":"http://a.test/","domain":"`
	tail := `"}`
	return []byte(head + strings.Repeat("a", n-len(head)-len(tail)) + tail)
}

// TestFloods is the hostile-caller check for floods: with the global cap (2) and the local queue (2)
// full, entry C answers local_queue_full at once and entry B 429, the origin never sees
// more than the cap at once, and the requests that got in finish normally. A flood on one
// domain gets self_rate_limited with the real wait.
func TestFloods(t *testing.T) {
	noLeaks(t)
	r := newRig(t, rigConfig{gateCapacity: 2, queueLength: 2, timeout: 20 * time.Second})
	a := serveAPI(t, r, nil)
	t.Cleanup(r.origin.releaseSlow)

	// Fill the cap and the queue with slow requests.
	type answer struct {
		status int
		m      map[string]any
	}
	held := make(chan answer, 4)
	for i := range 4 {
		go func() {
			status, _, m := a.post(t, "/v1/probe", fmt.Appendf(nil, `{"url":"http://slow%d.test/","min_interval_ms":0}`, i))
			held <- answer{status, m}
		}()
	}
	if !testkit.Eventually(30*time.Second, func() bool { return r.gate.InFlight() == 2 && r.gate.Waiting() == 2 }) {
		t.Fatalf("gate: %d in flight, %d waiting; want 2 and 2", r.gate.InFlight(), r.gate.Waiting())
	}
	const flood = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	for i := range flood {
		wg.Go(func() {
			path, body := "/v1/probe", fmt.Appendf(nil, `{"url":"http://flood%d.test/"}`, i)
			if i%2 == 1 {
				path, body = "/v1/render", fmt.Appendf(nil, `{"url":"http://flood%d.test/","should_render":false}`, i)
			}
			start := time.Now()
			status, retryAfter, m := a.post(t, path, body)
			// At once: long before any request in the gate could end (they wait for
			// releaseSlow), with room for a loaded machine.
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("%s answered after %v, want at once", path, took)
			}
			key := fmt.Sprintf("%s %d %v", path, status, m["fail_reason"])
			switch {
			case path == "/v1/probe" && status == 200:
				if m["has_reached_origin"] != false || m["http_status"] != nil {
					t.Errorf("C over the cap: %v, want has_reached_origin=false, http_status=null", m)
				}
			case path == "/v1/render" && status == 429:
				if retryAfter != "1" || m["retry_after_seconds"] != float64(1) {
					t.Errorf("B over the cap: Retry-After %q, body %v; want 1 and 1", retryAfter, m)
				}
			}
			mu.Lock()
			counts[key]++
			mu.Unlock()
		})
	}
	wg.Wait()
	want := map[string]int{"/v1/probe 200 local_queue_full": flood / 2, "/v1/render 429 local_queue_full": flood / 2}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("flood answers %v, want %v", counts, want)
	}
	if n := r.origin.maxSlowInFlight(); n > 2 {
		t.Errorf("the origin saw %d requests at once, over the cap of 2", n)
	}
	r.origin.releaseSlow()
	for range 4 {
		if got := <-held; got.status != 200 || got.m["fail_reason"] != nil {
			t.Errorf("a request that got in: %d %v, want a normal answer", got.status, got.m)
		}
	}

	// One domain flooded: after one request, the rest are refused with the real wait.
	if status, _, m := a.post(t, "/v1/render", []byte(`{"url":"http://one.test/","should_render":false,"min_interval_ms":0}`)); status != 200 {
		t.Fatalf("first request to one.test: %d %v", status, m)
	}
	counts = map[string]int{}
	for range 10 {
		wg.Go(func() {
			status, retryAfter, m := a.post(t, "/v1/render", []byte(`{"url":"http://one.test/","should_render":false,"min_interval_ms":60000}`))
			if status == 429 && retryAfter != "60" && retryAfter != "59" {
				t.Errorf("429 with Retry-After %q, want the interval's wait (60)", retryAfter)
			}
			mu.Lock()
			counts[fmt.Sprintf("%d %v", status, m["fail_reason"])]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if counts["429 self_rate_limited"] != 10 {
		t.Errorf("one-domain flood: %v, want all 10 self_rate_limited", counts)
	}
	if n := r.origin.seen("one.test"); n != 1 {
		t.Errorf("one.test saw %d requests, want 1", n)
	}
}

// TestRenderFlood: the local queue and 429 protect the renderers. With the browser pool
// at 1 render and 1 waiting, a flood of renders gets 429 local_queue_full at once, the
// pool never holds more, and the renders that got in finish.
func TestRenderFlood(t *testing.T) {
	noLeaks(t)
	r := newRig(t, rigConfig{renderConcurrency: 1, renderQueueLength: 1, timeout: renderTimeout})
	a := serveAPI(t, r, nil)
	t.Cleanup(r.origin.releaseSlow)
	if res, err := r.render("http://render-warmup.test/", renderTimeout); err != nil || reasonOf(res.Summary) != "" {
		t.Fatalf("warm-up render: %v %v", err, res)
	}
	renderersBefore := idleRenderers(t, r.pool)
	held := make(chan int, 2)
	for i := range 2 {
		go func() {
			status, _, _ := a.post(t, "/v1/render", fmt.Appendf(nil, `{"url":"http://slowrender%d.test/"}`, i))
			held <- status
		}()
	}
	if !testkit.Eventually(30*time.Second, func() bool { s := r.pool.Stats(); return s.BusyCount == 1 && s.QueuedCount == 1 }) {
		t.Fatalf("pool %+v: want 1 busy and 1 queued", r.pool.Stats())
	}
	var wg sync.WaitGroup
	var refused, other int
	var mu sync.Mutex
	for i := range 12 {
		wg.Go(func() {
			status, retryAfter, m := a.post(t, "/v1/render", fmt.Appendf(nil, `{"url":"http://renderflood%d.test/"}`, i))
			if s := r.pool.Stats(); s.BusyCount > 1 || s.QueuedCount > 1 {
				t.Errorf("pool %+v during the flood: over its size", s)
			}
			mu.Lock()
			defer mu.Unlock()
			if status == 429 && m["fail_reason"] == "local_queue_full" && retryAfter != "" {
				refused++
			} else {
				other++
			}
		})
	}
	wg.Wait()
	if refused != 12 || other != 0 {
		t.Errorf("flood: %d refused with 429 local_queue_full, %d otherwise; want all 12 refused", refused, other)
	}
	r.origin.releaseSlow()
	for range 2 {
		if status := <-held; status != 200 {
			t.Errorf("a render that got in answered %d", status)
		}
	}
	if n := r.origin.maxSlowInFlight(); n > 1 {
		t.Errorf("the origin saw %d slow documents at once, over the pool's 1", n)
	}
	checkNoTabLeft(t, r.pool, renderersBefore)
}

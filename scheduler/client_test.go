package scheduler

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"downloader"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is a real HTTP server that answers each path with a fixed status and body and
// records the request bodies as generic JSON.
type recorder struct {
	srv *httptest.Server

	mu     sync.Mutex // the handler runs on the server's goroutines, one per request
	bodies map[string][]map[string]any
	status map[string]int
	answer map[string]string
}

// setStatus makes path answer with status.
func (r *recorder) setStatus(path string, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status[path] = status
}

// setAnswer makes path answer with body.
func (r *recorder) setAnswer(path, body string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer[path] = body
}

// got returns the bodies path has received so far.
func (r *recorder) got(path string) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.bodies[path]...)
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{bodies: map[string][]map[string]any{}, status: map[string]int{}, answer: map[string]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s with Content-Type %q", req.Method, req.URL.Path, req.Header.Get("Content-Type"))
		}
		b, _ := io.ReadAll(req.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Errorf("%s: body is not a JSON object: %s", req.URL.Path, b)
		}
		r.mu.Lock()
		r.bodies[req.URL.Path] = append(r.bodies[req.URL.Path], m)
		st, answer := r.status[req.URL.Path], r.answer[req.URL.Path]
		r.mu.Unlock()
		if st == 0 {
			st = http.StatusOK
		}
		w.WriteHeader(st)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func newClient(t *testing.T, url string) *Client {
	c, err := New(Config{URL: url + "/", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestContractShapes pins the JSON of the three calls to docs/scheduler-contract.md.
func TestContractShapes(t *testing.T) {
	rec := newRecorder(t)
	rec.setAnswer("/v1/lease", `{"tasks":[{"task_id":"t-1","url":"https://news.example.tw/a","domain":"news.example.tw",
		"min_interval_ms":2000,"should_render":true,"should_store":true,"lease_expires_at":"2026-08-15T07:05:00Z","priority":3}]}`)
	c := newClient(t, rec.srv.URL)
	ctx := context.Background()

	tasks, err := c.Lease(ctx, "worker-7", 32)
	if err != nil {
		t.Fatal(err)
	}
	iv := int64(2000)
	want := []downloader.Task{{TaskID: "t-1", URL: "https://news.example.tw/a", Domain: "news.example.tw", MinIntervalMs: &iv,
		ShouldRender: true, ShouldStore: true, LeaseExpiresAt: time.Date(2026, 8, 15, 7, 5, 0, 0, time.UTC)}}
	if !reflect.DeepEqual(tasks, want) {
		t.Errorf("tasks = %+v, want %+v", tasks, want)
	}
	if got := rec.got("/v1/lease")[0]; !reflect.DeepEqual(got, map[string]any{"worker_id": "worker-7", "max_task_count": float64(32)}) {
		t.Errorf("lease body = %v", got)
	}

	st, raw := 503, 1234
	fr := downloader.FailHTTPStatusError
	r := &downloader.Report{TaskID: "t-1", Summary: downloader.Summary{Domain: "news.example.tw", HTTPStatus: &st, RawTextLength: &raw,
		HealthSignal: &downloader.HealthSignal{ElapsedMs: 12, BodyBytes: 99, ContentType: "text/html"}, FailReason: &fr, HasReachedOrigin: true},
		FetchedAt: time.Date(2026, 8, 15, 7, 1, 2, 0, time.UTC), PageKey: "abc"}
	if err := c.Report(ctx, r); err != nil {
		t.Fatal(err)
	}
	got := rec.got("/v1/report")[0]
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	wantKeys := []string{"task_id", "domain", "http_status", "raw_text_length", "text_length", "health_signal", "fail_reason", "has_reached_origin", "fetched_at", "page_key"}
	if len(keys) != len(wantKeys) {
		t.Errorf("report keys = %v, want %v", keys, wantKeys)
	}
	for _, k := range wantKeys {
		if !keys[k] {
			t.Errorf("report lacks %q: %v", k, got)
		}
	}
	if got["fail_reason"] != "http_status_error" || got["text_length"] != nil || got["fetched_at"] != "2026-08-15T07:01:02Z" {
		t.Errorf("report body = %v", got)
	}

	if err := c.Release(ctx, "t-2", 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := rec.got("/v1/release")[0]; !reflect.DeepEqual(got, map[string]any{"task_id": "t-2", "retry_after_seconds": float64(2)}) {
		t.Errorf("release body = %v (1.5 s rounds up to 2)", got)
	}
}

// TestLeaseDecodesLeniently: a malformed task is passed on with the bad field left out (the
// engine then reports it as invalid_task); one without a task id is skipped.
func TestLeaseDecodesLeniently(t *testing.T) {
	rec := newRecorder(t)
	rec.setAnswer("/v1/lease", `{"tasks":[
		{"task_id":"a","url":42,"min_interval_ms":0},
		{"task_id":"b","url":"http://b.test/","min_interval_ms":"fast"},
		{"task_id":"c","url":"http://c.test/","min_interval_ms":null},
		{"url":"http://d.test/","min_interval_ms":0},
		17
	]}`)
	tasks, err := newClient(t, rec.srv.URL).Lease(context.Background(), "w", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 3 {
		t.Fatalf("tasks = %+v, want a, b, c", tasks)
	}
	if tasks[0].URL != "" || tasks[1].MinIntervalMs != nil || tasks[2].MinIntervalMs != nil {
		t.Errorf("tasks = %+v", tasks)
	}
}

func TestErrorClassification(t *testing.T) {
	tests := []struct {
		status int
		code   string
	}{
		{400, downloader.EINVALID},
		{409, downloader.EINVALID},
		{404, downloader.ENOTFOUND},
		{410, downloader.ENOTFOUND},
		{408, downloader.EUNAVAILABLE},
		{429, downloader.EUNAVAILABLE},
		{500, downloader.EUNAVAILABLE},
		{503, downloader.EUNAVAILABLE},
	}
	rec := newRecorder(t)
	c := newClient(t, rec.srv.URL)
	for _, tt := range tests {
		rec.setStatus("/v1/report", tt.status)
		err := c.Report(context.Background(), &downloader.Report{TaskID: "x"})
		if downloader.ErrorCode(err) != tt.code {
			t.Errorf("HTTP %d: %v, want code %s", tt.status, err, tt.code)
		}
	}
	// Down: nothing listens.
	rec.srv.Close()
	if err := c.Release(context.Background(), "x", 0); downloader.ErrorCode(err) != downloader.EUNAVAILABLE {
		t.Errorf("scheduler down: %v", err)
	}
	if _, err := New(Config{URL: "ftp://x"}); downloader.ErrorField(err) != "scheduler_url" {
		t.Errorf("bad URL: %v", err)
	}
}

// TestReportBatch: one call carries every report; each report's outcome is its own item's
// status, classified as the single form's answer, and a report the answer leaves out is
// not acknowledged.
func TestReportBatch(t *testing.T) {
	rec := newRecorder(t)
	rec.setAnswer("/v1/reports", `{"results":[{"task_id":"t1","http_status":200},{"task_id":"t2","http_status":404,"error":"unknown task"},
		{"task_id":"t3","http_status":503},{"task_id":"t5","http_status":400,"error":"bad report"}]}`)
	c := newClient(t, rec.srv.URL)
	rs := []downloader.Report{{TaskID: "t1"}, {TaskID: "t2"}, {TaskID: "t3"}, {TaskID: "t4"}, {TaskID: "t5"}}
	errs := c.ReportBatch(context.Background(), rs)
	want := []string{"", downloader.ENOTFOUND, downloader.EUNAVAILABLE, downloader.EUNAVAILABLE, downloader.EINVALID}
	if len(errs) != len(want) {
		t.Fatalf("errs = %v, want %d", errs, len(want))
	}
	for i, code := range want {
		if got := downloader.ErrorCode(errs[i]); got != code || (code == "") != (errs[i] == nil) {
			t.Errorf("%s: %v, want code %q", rs[i].TaskID, errs[i], code)
		}
	}
	bodies := rec.got("/v1/reports")
	if len(bodies) != 1 || len(bodies[0]["reports"].([]any)) != 5 || len(rec.got("/v1/report")) != 0 {
		t.Errorf("calls: batched %v, single %d", bodies, len(rec.got("/v1/report")))
	}

	// The whole call failing fails every report, to be retried.
	rec.setStatus("/v1/reports", http.StatusServiceUnavailable)
	for i, err := range c.ReportBatch(context.Background(), rs[:2]) {
		if downloader.ErrorCode(err) != downloader.EUNAVAILABLE {
			t.Errorf("503 to the call, report %d: %v", i, err)
		}
	}
}

// TestBatchFallsBackToSingle: a scheduler without the batched form (404 to /v1/reports)
// gets one call per report, from then on without trying the batched form again.
func TestBatchFallsBackToSingle(t *testing.T) {
	rec := newRecorder(t)
	rec.setStatus("/v1/reports", http.StatusNotFound)
	rec.setStatus("/v1/releases", http.StatusNotFound)
	c := newClient(t, rec.srv.URL)
	ctx := context.Background()
	for i, err := range c.ReportBatch(ctx, []downloader.Report{{TaskID: "a"}, {TaskID: "b"}}) {
		if err != nil {
			t.Errorf("report %d: %v", i, err)
		}
	}
	for i, err := range c.ReleaseBatch(ctx, []string{"c"}, []time.Duration{2500 * time.Millisecond}) {
		if err != nil {
			t.Errorf("release %d: %v", i, err)
		}
	}
	if n := len(rec.got("/v1/reports")); n != 1 {
		t.Errorf("%d batched report calls, want 1 (then the single form only)", n)
	}
	if n := len(rec.got("/v1/releases")); n != 0 {
		t.Errorf("%d batched release calls after the fallback, want 0", n)
	}
	if n := len(rec.got("/v1/report")); n != 2 {
		t.Errorf("%d single reports, want 2", n)
	}
	if got := rec.got("/v1/release"); len(got) != 1 || !reflect.DeepEqual(got[0], map[string]any{"task_id": "c", "retry_after_seconds": float64(3)}) {
		t.Errorf("single releases = %v", got)
	}
}

// TestReleaseBatchShape pins the batched release body to docs/scheduler-contract.md.
func TestReleaseBatchShape(t *testing.T) {
	rec := newRecorder(t)
	rec.setAnswer("/v1/releases", `{"results":[{"task_id":"a","http_status":204},{"task_id":"b","http_status":410}]}`)
	c := newClient(t, rec.srv.URL)
	errs := c.ReleaseBatch(context.Background(), []string{"a", "b"}, []time.Duration{0, 61 * time.Second})
	if errs[0] != nil || downloader.ErrorCode(errs[1]) != downloader.ENOTFOUND {
		t.Errorf("errs = %v", errs)
	}
	want := map[string]any{"releases": []any{
		map[string]any{"task_id": "a", "retry_after_seconds": float64(1)},
		map[string]any{"task_id": "b", "retry_after_seconds": float64(61)},
	}}
	if got := rec.got("/v1/releases"); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("body = %v, want %v", got, want)
	}
}

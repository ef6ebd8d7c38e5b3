package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"downloader"
	"downloader/engine"
	"downloader/limiter"
	"downloader/localqueue"
	"downloader/store/embedded"
)

// queueAdapter is the small adapter cmd/downloader also has between the embedded queue and
// TaskQueue.
type queueAdapter struct {
	q   *localqueue.Queue
	def time.Duration
}

func (a queueAdapter) CheckTask(t downloader.Task) error {
	_, err := localqueue.CheckTask(t, a.def, downloader.HeaderPolicy{})
	return err
}

func (a queueAdapter) SubmitTasks(ctx context.Context, tasks []downloader.Task) ([]TaskSubmission, error) {
	res, err := a.q.Submit(ctx, tasks)
	if err != nil {
		return nil, err
	}
	out := make([]TaskSubmission, len(res))
	for i, r := range res {
		out[i] = TaskSubmission{TaskID: r.TaskID, URL: r.URL, IsDuplicate: r.IsDuplicate, State: r.State}
	}
	return out, nil
}

func (a queueAdapter) TaskStatus(ctx context.Context, taskID string) (*downloader.TaskStatus, error) {
	return a.q.TaskStatus(ctx, taskID)
}

func (a queueAdapter) ListTasks(ctx context.Context, state downloader.TaskState, cursor string, limit int) ([]downloader.TaskStatus, string, error) {
	return a.q.ListTasks(ctx, state, cursor, limit)
}

// storeHarness is a harness whose server has the embedded store and local queue behind it.
type storeHarness struct {
	*harness
	store *embedded.Store
	queue *localqueue.Queue
}

func newStoreHarness(t *testing.T, f *fakeFetcher) *storeHarness {
	t.Helper()
	st, err := embedded.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	h := newHarness(t, f)
	q, err := localqueue.Open(t.Context(), st, localqueue.Config{Clock: h.clk, DefaultMinInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h.eng = engine.New(engine.Config{Clock: h.clk, Limiter: h.lim, Gate: h.gate, Fetcher: f, Settings: h.set,
		Results: st, Pages: st, DefaultMinInterval: time.Second, DefaultTimeout: 5 * time.Second})
	h.srv = New(Config{Probe: h.eng, Render: h.eng, Settings: h.eng, Domains: h.lim, Slots: h.gate, Clock: h.clk, Tasks: queueAdapter{q, time.Second}, Results: st, Pages: st})
	return &storeHarness{harness: h, store: st, queue: q}
}

func TestSubmitTasks(t *testing.T) {
	h := newStoreHarness(t, &fakeFetcher{})
	rec, m := h.do(t, "POST", "/v1/tasks", `{"tasks":[
		{"url":"http://a.test/1","min_interval_ms":500},
		{"url":"http://A.test/1#again"},
		{"url":"http://b.test/","domain":"b.test","should_render":true,"should_store":false,"task_id":"mine"}]}`)
	if rec.Code != http.StatusCreated {
		t.Fatalf("status %d, body %s", rec.Code, rec.Body.String())
	}
	if m["queued_count"] != float64(2) || m["duplicate_count"] != float64(1) {
		t.Errorf("answer = %v", m)
	}
	tasks := m["tasks"].([]any)
	if second := tasks[1].(map[string]any); second["is_duplicate"] != true || second["task_id"] != tasks[0].(map[string]any)["task_id"] {
		t.Errorf("duplicate = %v", second)
	}
	if c := h.queue.Counts(); c.PendingCount != 2 {
		t.Errorf("queue counts = %+v", c)
	}
	rec2, err := h.queue.Task(t.Context(), "mine")
	if err != nil || !rec2.ShouldRender || rec2.ShouldStore || *rec2.MinIntervalMs != 1000 {
		t.Errorf("task mine = %+v, %v (default interval 1000, should_store false as given)", rec2, err)
	}
	// The same list again: nothing new, 200.
	rec, m = h.do(t, "POST", "/v1/tasks", `{"tasks":[{"url":"http://a.test/1"}]}`)
	if rec.Code != http.StatusOK || m["queued_count"] != float64(0) {
		t.Errorf("resubmit: %d %v", rec.Code, m)
	}
}

func TestSubmitTasksBadInputNamesTheField(t *testing.T) {
	h := newStoreHarness(t, &fakeFetcher{})
	tests := []struct{ name, body, field string }{
		{"not json", `tasks`, "body"},
		{"no tasks", `{}`, "tasks"},
		{"unknown top field", `{"tasks":[],"urls":[]}`, "urls"},
		{"tasks not a list", `{"tasks":{}}`, "tasks"},
		{"task not an object", `{"tasks":["http://a.test/"]}`, "tasks[0]"},
		{"unknown task field", `{"tasks":[{"url":"http://a.test/"},{"url":"http://a.test/2","render":true}]}`, "tasks[1].render"},
		{"lease is the queue's", `{"tasks":[{"url":"http://a.test/","lease_expires_at":"2026-01-01T00:00:00Z"}]}`, "tasks[0].lease_expires_at"},
		{"url missing", `{"tasks":[{"min_interval_ms":5}]}`, "tasks[0].url"},
		{"url wrong type", `{"tasks":[{"url":5}]}`, "tasks[0].url"},
		{"url with a space", `{"tasks":[{"url":"http://news.test/ bad","min_interval_ms":1}]}`, "tasks[0].url"},
		{"URL is not url", `{"tasks":[{"URL":"http://news.test/"}]}`, "tasks[0].URL"},
		{"Tasks is not tasks", `{"Tasks":[]}`, "Tasks"},
		{"bad url", `{"tasks":[{"url":"http://a.test/"},{"url":"ftp://a.test/"}]}`, "tasks[1].url"},
		{"domain mismatch", `{"tasks":[{"url":"http://a.test/","domain":"b.test"}]}`, "tasks[0].domain"},
		{"interval negative", `{"tasks":[{"url":"http://a.test/","min_interval_ms":-5}]}`, "tasks[0].min_interval_ms"},
		{"interval fractional", `{"tasks":[{"url":"http://a.test/","min_interval_ms":0.5}]}`, "tasks[0].min_interval_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, m := h.do(t, "POST", "/v1/tasks", tt.body)
			if rec.Code != http.StatusBadRequest || m["field"] != tt.field {
				t.Errorf("status %d field %v (%v), want 400 naming %q", rec.Code, m["field"], m["error"], tt.field)
			}
		})
	}
	if c := h.queue.Counts(); c.TotalCount() != 0 {
		t.Errorf("a refused submission queued tasks: %+v", c)
	}
	// Without a local queue (tasks come from a scheduler): 404.
	plain := newHarness(t, &fakeFetcher{})
	if rec, _ := plain.do(t, "POST", "/v1/tasks", `{"tasks":[]}`); rec.Code != http.StatusNotFound {
		t.Errorf("no queue: status %d", rec.Code)
	}
}

// TestProbesStoreNothing: a probe writes no fetch_result and no page (SPEC §5), while a
// render with should_store writes both, and both read back through the API.
func TestProbesStoreNothing(t *testing.T) {
	h := newStoreHarness(t, &fakeFetcher{fn: func(ctx context.Context, u *url.URL, adm *limiter.Admission) *downloader.Outcome {
		n := 5
		return &downloader.Outcome{HTTPStatus: 200, FinalURL: u.String(), RawTextLength: &n, Body: []byte("<p>hello " + u.Path + "</p>"),
			HealthSignal: downloader.HealthSignal{ContentType: "text/html; charset=utf-8"}}
	}})
	for i := range 3 {
		if rec, _ := h.do(t, "POST", "/v1/probe", fmt.Sprintf(`{"url":"http://p%d.test/x","min_interval_ms":0}`, i)); rec.Code != 200 {
			t.Fatalf("probe: %d", rec.Code)
		}
	}
	_, m := h.do(t, "GET", "/v1/fetch_results", "")
	if got := m["fetch_results"].([]any); len(got) != 0 {
		t.Fatalf("probes stored %d fetch results: %v", len(got), got)
	}
	// A render with should_store stores both; its page reads back with its content type.
	rec, m := h.do(t, "POST", "/v1/render", `{"url":"http://r.test/page","should_render":false,"should_store":true,"min_interval_ms":0}`)
	if rec.Code != 200 || m["page_key"] == nil {
		t.Fatalf("render: %d %v", rec.Code, m)
	}
	key := m["page_key"].(string)
	_, m = h.do(t, "GET", "/v1/fetch_results?domain=R.TEST&limit=10", "")
	got := m["fetch_results"].([]any)
	if len(got) != 1 || got[0].(map[string]any)["page_key"] != key || got[0].(map[string]any)["entry"] != "b" || m["next_cursor"] != nil {
		t.Fatalf("fetch results = %v", m)
	}
	req := httptest.NewRequest("GET", "/v1/pages/"+key, nil)
	prec := httptest.NewRecorder()
	h.srv.ServeHTTP(prec, req)
	if prec.Code != 200 || prec.Body.String() != "<p>hello /page</p>" || prec.Header().Get("Content-Type") != "text/html; charset=utf-8" ||
		prec.Header().Get("Content-Security-Policy") != "sandbox" || prec.Header().Get("Page-Url") != "http://r.test/page" {
		t.Errorf("page: %d %q %v", prec.Code, prec.Body.String(), prec.Header())
	}
}

func TestFetchResultsPagingAndErrors(t *testing.T) {
	h := newStoreHarness(t, &fakeFetcher{})
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		d := "a.test"
		if i%2 == 1 {
			d = "b.test"
		}
		if err := h.store.PutFetchResult(t.Context(), &downloader.FetchResult{Summary: downloader.Summary{Domain: d, HasReachedOrigin: true},
			URL: fmt.Sprintf("http://%s/%d", d, i), Entry: downloader.EntryLease, FetchedAt: base.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	cursor := ""
	for range 10 {
		_, m := h.do(t, "GET", "/v1/fetch_results?limit=2&cursor="+cursor, "")
		for _, r := range m["fetch_results"].([]any) {
			seen = append(seen, r.(map[string]any)["url"].(string))
		}
		cursor, _ = m["next_cursor"].(string)
		if cursor == "" {
			break
		}
	}
	want := "http://a.test/4 http://b.test/3 http://a.test/2 http://b.test/1 http://a.test/0"
	if strings.Join(seen, " ") != want {
		t.Errorf("paged = %v, want newest first %v", seen, want)
	}
	_, m := h.do(t, "GET", "/v1/fetch_results?domain=b.test", "")
	if n := len(m["fetch_results"].([]any)); n != 2 {
		t.Errorf("b.test has %d results, want 2", n)
	}
	for _, tt := range []struct{ query, field string }{
		{"limit=abc", "limit"}, {"limit=0", "limit"}, {"limit=5000", "limit"}, {"cursor=zz", "cursor"}, {"domain=%5Bx", "domain"},
	} {
		rec, m := h.do(t, "GET", "/v1/fetch_results?"+tt.query, "")
		if rec.Code != 400 || m["field"] != tt.field {
			t.Errorf("%s: %d %v, want 400 naming %s", tt.query, rec.Code, m, tt.field)
		}
	}
	for _, key := range []string{"nope", strings.Repeat("a", 64)} {
		if rec, _ := h.do(t, "GET", "/v1/pages/"+key, ""); rec.Code != 404 {
			t.Errorf("page %s: %d, want 404", key, rec.Code)
		}
	}
	var body map[string]any
	_, body = h.do(t, "GET", "/v1/pages/nope", "")
	if b, _ := json.Marshal(body); !strings.Contains(string(b), "not found") {
		t.Errorf("404 body %s", b)
	}
}

// TestTaskStatusEveryState: GET /v1/tasks/{task_id} and GET /v1/tasks?state= answer for
// every state a local-queue task can be in, with attempt_count and the last fail_reason.
func TestTaskStatusEveryState(t *testing.T) {
	h := newStoreHarness(t, &fakeFetcher{})
	ids := []string{"t-done", "t-failed", "t-leased", "t-queued", "t-retrying", "t-skipped"}
	var body strings.Builder
	body.WriteString(`{"tasks":[`)
	for i, id := range ids {
		if i > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"task_id":%q,"url":"http://%s.test/"}`, id, id)
	}
	body.WriteString("]}")
	if rec, _ := h.do(t, "POST", "/v1/tasks", body.String()); rec.Code != http.StatusCreated {
		t.Fatalf("submit: %d", rec.Code)
	}
	ctx := t.Context()
	leased, err := h.queue.Lease(ctx, "w", 5) // every id but t-skipped (ids sort by domain)
	if err != nil || len(leased) != 5 {
		t.Fatalf("lease: %d tasks, %v", len(leased), err)
	}
	if _, err := h.queue.Lease(ctx, "w", 1); err != nil {
		t.Fatal(err)
	}
	now := h.clk.Now()
	st200, st404, st503 := 200, 404, 503
	httpErr := downloader.FailHTTPStatusError
	report := func(r *downloader.Report) {
		t.Helper()
		if err := h.queue.Report(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	report(&downloader.Report{TaskID: "t-done", FetchedAt: now, PageKey: "k", Summary: downloader.Summary{HTTPStatus: &st200, HasReachedOrigin: true}})
	report(&downloader.Report{TaskID: "t-failed", FetchedAt: now, Summary: downloader.Summary{HTTPStatus: &st404, FailReason: &httpErr, HasReachedOrigin: true}})
	report(&downloader.Report{TaskID: "t-retrying", FetchedAt: now, Summary: downloader.Summary{HTTPStatus: &st503, FailReason: &httpErr, HasReachedOrigin: true}})
	report(&downloader.Report{TaskID: "t-skipped", FetchedAt: now, SkipReason: downloader.SkipRobotsDisallowed})
	// t-queued goes back unrun.
	if err := h.queue.Release(ctx, "t-queued", time.Second); err != nil {
		t.Fatal(err)
	}

	want := map[string]struct {
		state        string
		attemptCount float64
		failReason   any
		skipReason   any
	}{
		"t-done":     {"done", 1, nil, nil},
		"t-failed":   {"failed", 1, "http_status_error", nil},
		"t-leased":   {"leased", 0, nil, nil},
		"t-queued":   {"queued", 0, nil, nil},
		"t-retrying": {"queued", 1, "http_status_error", nil},
		"t-skipped":  {"skipped", 0, nil, "robots_disallowed"},
	}
	for id, w := range want {
		rec, m := h.do(t, "GET", "/v1/tasks/"+id, "")
		if rec.Code != 200 || m["state"] != w.state || m["attempt_count"] != w.attemptCount || m["fail_reason"] != w.failReason || m["skip_reason"] != w.skipReason {
			t.Errorf("%s: %d %v, want state %s attempt_count %v fail_reason %v skip_reason %v", id, rec.Code, m, w.state, w.attemptCount, w.failReason, w.skipReason)
		}
	}
	if _, m := h.do(t, "GET", "/v1/tasks/t-retrying", ""); m["next_attempt_at"] == nil {
		t.Errorf("a task waiting out its backoff shows no next_attempt_at: %v", m)
	}
	if _, m := h.do(t, "GET", "/v1/tasks/t-leased", ""); m["lease_expires_at"] == nil || m["fetched_at"] != nil {
		t.Errorf("a leased task: %v", m)
	}
	for state, ids := range map[string][]string{"done": {"t-done"}, "failed": {"t-failed"}, "leased": {"t-leased"},
		"queued": {"t-queued", "t-retrying"}, "skipped": {"t-skipped"}, "": ids} {
		rec, m := h.do(t, "GET", "/v1/tasks?state="+state, "")
		var got []string
		for _, x := range m["tasks"].([]any) {
			got = append(got, x.(map[string]any)["task_id"].(string))
		}
		if rec.Code != 200 || strings.Join(got, " ") != strings.Join(ids, " ") || m["next_cursor"] != nil {
			t.Errorf("state=%s: %d %v next_cursor %v, want %v", state, rec.Code, got, m["next_cursor"], ids)
		}
	}
	// Paging: two at a time, every task once.
	var paged []string
	cursor := ""
	for range 10 {
		_, m := h.do(t, "GET", "/v1/tasks?limit=2&cursor="+url.QueryEscape(cursor), "")
		for _, x := range m["tasks"].([]any) {
			paged = append(paged, x.(map[string]any)["task_id"].(string))
		}
		if cursor, _ = m["next_cursor"].(string); cursor == "" {
			break
		}
	}
	if strings.Join(paged, " ") != strings.Join(ids, " ") {
		t.Errorf("paged %v, want %v", paged, ids)
	}
	for _, tt := range []struct{ query, field string }{{"state=running", "state"}, {"limit=0", "limit"}, {"limit=x", "limit"}, {"limit=1001", "limit"}} {
		if rec, m := h.do(t, "GET", "/v1/tasks?"+tt.query, ""); rec.Code != 400 || m["field"] != tt.field {
			t.Errorf("%s: %d %v, want 400 naming %s", tt.query, rec.Code, m, tt.field)
		}
	}
	if rec, _ := h.do(t, "GET", "/v1/tasks/nope", ""); rec.Code != 404 {
		t.Errorf("unknown task: %d, want 404", rec.Code)
	}
	plain := newHarness(t, &fakeFetcher{})
	if rec, _ := plain.do(t, "GET", "/v1/tasks/t-done", ""); rec.Code != http.StatusNotFound {
		t.Errorf("no queue: status %d", rec.Code)
	}
}

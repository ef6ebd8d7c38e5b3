package engine

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/fetch"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/store/embedded/embeddedtest"
)

// TestConditionalRecrawl: a stored plain fetch of a page with validators makes the next
// stored fetch of its URL conditional; the origin's 304 is a success (http_status 304,
// fail_reason null, reached, is_not_modified) that keeps the stored page and returns its
// key and content, on entry A and on entry B alike (SPEC §4, §5). A probe stores nothing
// and asks unconditionally.
func TestConditionalRecrawl(t *testing.T) {
	var full, notModified atomic.Int32
	const page = "<html><body><p>unchanged page</p></body></html>"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == `"v1"` {
			notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		full.Add(1)
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	}))
	t.Cleanup(srv.Close)
	rule, err := netguard.ParseConnectTo("site.test::" + srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	f := fetch.New(fetch.Config{Guard: netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}})})
	t.Cleanup(f.Close)
	st := embeddedtest.Open(t, t.TempDir())
	clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
	lim := limiter.New(clk)
	clk.Advance(time.Hour)
	e := New(Config{Clock: clk, Limiter: lim, Gate: limiter.NewGate(8, 8), Fetcher: f, Pages: st, Results: st,
		DefaultMinInterval: 0, DefaultTimeout: 10 * time.Second})
	const raw = "http://site.test/a"
	ms := func(n int64) *int64 { return &n }

	first := runAndStore(t, t.Context(), e, &downloader.Task{TaskID: "t1", URL: raw, MinIntervalMs: ms(0), ShouldStore: true})
	if first.Report == nil || first.Report.FailReason != nil || first.Report.PageKey == "" {
		t.Fatalf("first fetch: %+v", first.Report)
	}
	key := first.Report.PageKey

	second := runAndStore(t, t.Context(), e, &downloader.Task{TaskID: "t2", URL: raw, MinIntervalMs: ms(0), ShouldStore: true})
	r := second.Report
	if r == nil || r.FailReason != nil || !r.HasReachedOrigin || r.HTTPStatus == nil || *r.HTTPStatus != 304 ||
		!r.HealthSignal.IsNotModified || r.PageKey != key || r.RawTextLength == nil || *r.RawTextLength != len("unchanged page") {
		t.Fatalf("recrawl: %+v (health_signal %+v), want a 304 success keeping page %s", r, r.HealthSignal, key)
	}

	u, _ := url.Parse(raw)
	ans, err := e.Render(t.Context(), downloader.Request{URL: raw, Domain: "site.test", ShouldStore: true}, u)
	if err != nil {
		t.Fatal(err)
	}
	if ans.PageKey != key || !ans.Summary.HealthSignal.IsNotModified || ans.HTML != page {
		t.Errorf("entry B recrawl: page_key %q, is_not_modified %v, html %q", ans.PageKey, ans.Summary.HealthSignal.IsNotModified, ans.HTML)
	}

	e.Probe(t.Context(), downloader.Request{URL: raw, Domain: "site.test"}, u)
	if full.Load() != 2 || notModified.Load() != 2 {
		t.Errorf("origin answered %d full pages and %d 304s, want 2 and 2 (first task, probe; second task, B)", full.Load(), notModified.Load())
	}
	results, _, err := st.FetchResults(t.Context(), "site.test", 10, "")
	if err != nil || len(results) != 3 {
		t.Fatalf("fetch_results %d (%v), want 3", len(results), err)
	}
	for _, res := range results {
		if res.PageKey != key {
			t.Errorf("fetch_result %s has page_key %q, want %q", res.TaskID, res.PageKey, key)
		}
	}
}

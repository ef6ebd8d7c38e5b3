package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/clock/clocktest"
	"downloader/engine"
	"downloader/internal/testkit"
	"downloader/limiter"
)

// fakeFetcher answers every fetch with fn, or a 200 page.
type fakeFetcher struct {
	clk clock.Clock
	fn  func(ctx context.Context, u *url.URL, adm *limiter.Admission) *downloader.Outcome
}

func (f *fakeFetcher) FetchWith(ctx context.Context, u *url.URL, adm *limiter.Admission, _ limiter.HopAdmitter, _ downloader.FetchOptions) *downloader.Outcome {
	if f.fn != nil {
		return f.fn(ctx, u, adm)
	}
	if f.clk != nil {
		adm.Wire(f.clk.Now())
	}
	n := 5
	return &downloader.Outcome{HTTPStatus: 200, FinalURL: u.String(), RawTextLength: &n, Body: []byte("<p>hello</p>"), Text: "hello"}
}

var _ engine.Fetcher = (*fakeFetcher)(nil)

type harness struct {
	clk  *clocktest.Fake
	eng  *engine.Engine
	lim  *limiter.Limiter
	gate *limiter.Gate
	srv  *Server
	set  *testkit.SettingsStore
}

func newHarness(t testing.TB, f engine.Fetcher) *harness {
	t.Helper()
	clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
	lim := limiter.New(clk)
	clk.Advance(time.Hour) // past the conservative rebuild window
	gate := limiter.NewGate(4, 2)
	if ff, ok := f.(*fakeFetcher); ok && ff.clk == nil {
		ff.clk = clk
	}
	set := &testkit.SettingsStore{}
	eng := engine.New(engine.Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: f, Settings: set,
		DefaultMinInterval: time.Second, DefaultTimeout: 5 * time.Second})
	return &harness{clk: clk, eng: eng, lim: lim, gate: gate, set: set,
		srv: New(Config{Probe: eng, Render: eng, Settings: eng, Domains: lim, Slots: gate, Clock: clk})}
}

func (h *harness) do(t *testing.T, method, path, body string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	var m map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s %s: response is not a JSON object: %q", method, path, rec.Body.String())
		}
	}
	return rec, m
}

func TestBadInputIs400NamingTheField(t *testing.T) {
	h := newHarness(t, &fakeFetcher{})
	big := `{"url":"http://a.test/","domain":"` + strings.Repeat("a", 2<<20) + `"}`
	tests := []struct {
		name, path, body, field string
	}{
		{"malformed json", "/v1/probe", `{"url":`, "body"},
		{"not json", "/v1/probe", `hello`, "body"},
		{"empty body", "/v1/probe", ``, "body"},
		{"array body", "/v1/probe", `[]`, "body"},
		{"two objects", "/v1/probe", `{"url":"http://a.test/"} {}`, "body"},
		{"unknown field render", "/v1/render", `{"url":"http://a.test/","render":true}`, "render"},
		{"unknown field reached", "/v1/probe", `{"url":"http://a.test/","reached":true}`, "reached"},
		{"missing url", "/v1/probe", `{}`, "url"},
		{"upper case URL is not url", "/v1/probe", `{"URL":"http://a.test/"}`, "URL"},
		{"url with a space", "/v1/probe", `{"url":"http://news.test/ bad"}`, "url"},
		{"url with a tab", "/v1/render", `{"url":"http://news.test/\tbad"}`, "url"},
		{"duplicate member", "/v1/probe", `{"url":"http://a.test/","url":"http://b.test/"}`, "url"},
		{"url wrong type", "/v1/probe", `{"url":5}`, "url"},
		{"ftp url", "/v1/probe", `{"url":"ftp://a.test/"}`, "url"},
		{"no host", "/v1/probe", `{"url":"http:///x"}`, "url"},
		{"credentials", "/v1/render", `{"url":"http://user:pw@a.test/"}`, "url"},
		{"bad port", "/v1/probe", `{"url":"http://a.test:99999/"}`, "url"},
		{"domain mismatch", "/v1/probe", `{"url":"http://a.test/","domain":"b.test"}`, "domain"},
		{"domain mismatch render", "/v1/render", `{"url":"http://a.test/","domain":"evil.test"}`, "domain"},
		{"negative interval", "/v1/probe", `{"url":"http://a.test/","min_interval_ms":-1}`, "min_interval_ms"},
		{"absurd interval", "/v1/render", `{"url":"http://a.test/","min_interval_ms":99999999999}`, "min_interval_ms"},
		{"fractional interval", "/v1/probe", `{"url":"http://a.test/","min_interval_ms":1.5}`, "min_interval_ms"},
		{"should_render string", "/v1/probe", `{"url":"http://a.test/","should_render":"yes"}`, "should_render"},
		{"timeout zero", "/v1/render", `{"url":"http://a.test/","timeout_ms":0}`, "timeout_ms"},
		{"timeout huge", "/v1/render", `{"url":"http://a.test/","timeout_ms":86400000}`, "timeout_ms"},
		{"skip document", "/v1/render", `{"url":"http://a.test/","skip_resource_types":["document"]}`, "skip_resource_types"},
		{"skip unknown type", "/v1/render", `{"url":"http://a.test/","skip_resource_types":["Image"]}`, "skip_resource_types"},
		{"skip not a list", "/v1/render", `{"url":"http://a.test/","skip_resource_types":"image"}`, "skip_resource_types"},
		{"body over 1 MiB", "/v1/probe", big, "body"},
		{"header host", "/v1/render", `{"url":"http://a.test/","request_headers":{"Host":"b.test"}}`, "request_headers.Host"},
		{"header hop by hop", "/v1/probe", `{"url":"http://a.test/","request_headers":{"connection":"close"}}`, "request_headers.connection"},
		{"header not allowed", "/v1/probe", `{"url":"http://a.test/","request_headers":{"X-Api-Key":"k"}}`, "request_headers.X-Api-Key"},
		{"header user agent", "/v1/render", `{"url":"http://a.test/","request_headers":{"User-Agent":"me"}}`, "request_headers.User-Agent"},
		{"header value newline", "/v1/probe", `{"url":"http://a.test/","request_headers":{"Cookie":"a=b\r\nX: y"}}`, "request_headers.Cookie"},
		{"header value not a string", "/v1/probe", `{"url":"http://a.test/","request_headers":{"Cookie":1}}`, "request_headers.Cookie"},
		{"headers not an object", "/v1/probe", `{"url":"http://a.test/","request_headers":["Cookie: a"]}`, "request_headers"},
		{"settings missing", "/v1/settings", `{}`, "max_concurrent_count"},
		{"settings zero", "/v1/settings", `{"max_concurrent_count":0}`, "max_concurrent_count"},
		{"settings unknown", "/v1/settings", `{"min_interval_ms":1}`, "min_interval_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := http.MethodPost
			if tt.path == "/v1/settings" {
				method = http.MethodPut
			}
			rec, m := h.do(t, method, tt.path, tt.body)
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("status = %d, want 400; body %s", rec.Code, rec.Body.String())
			}
			if m["field"] != tt.field {
				t.Errorf("field = %v, want %q (error %v)", m["field"], tt.field, m["error"])
			}
			if msg, _ := m["error"].(string); msg == "" {
				t.Errorf("no error message")
			}
		})
	}
}

func TestProbeOverLimitIsNotReached(t *testing.T) {
	h := newHarness(t, &fakeFetcher{})
	rec, m := h.do(t, "POST", "/v1/probe", `{"url":"http://news.example.tw/","min_interval_ms":1000}`)
	if rec.Code != 200 || m["has_reached_origin"] != true || m["fail_reason"] != nil {
		t.Fatalf("first probe: %d %v", rec.Code, m)
	}
	if m["text_length"] != nil {
		t.Errorf("text_length = %v, want null without render", m["text_length"])
	}
	rec, m = h.do(t, "POST", "/v1/probe", `{"url":"http://NEWS.example.tw.:80/x","min_interval_ms":1000}`)
	if rec.Code != 200 {
		t.Fatalf("over-limit probe status = %d, want 200", rec.Code)
	}
	want := map[string]any{"has_reached_origin": false, "fail_reason": "self_rate_limited", "http_status": nil, "domain": "news.example.tw"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	h.clk.Advance(time.Second)
	if _, m = h.do(t, "POST", "/v1/probe", `{"url":"http://news.example.tw/","min_interval_ms":1000}`); m["fail_reason"] != nil {
		t.Errorf("after the interval: fail_reason = %v", m["fail_reason"])
	}
}

func TestRenderOverLimitIs429(t *testing.T) {
	h := newHarness(t, &fakeFetcher{})
	body := `{"url":"http://blog.example.com/","should_render":false}`
	if rec, _ := h.do(t, "POST", "/v1/render", body); rec.Code != 200 {
		t.Fatalf("first render: %d", rec.Code)
	}
	h.clk.Advance(300 * time.Millisecond)
	rec, m := h.do(t, "POST", "/v1/render", body)
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("status = %d, want 429", rec.Code)
	}
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1 (700 ms rounded up)", got)
	}
	if m["retry_after_seconds"] != float64(1) {
		t.Errorf("retry_after_seconds = %v", m["retry_after_seconds"])
	}
	rec, m = h.do(t, "GET", "/v1/domains/blog.example.com", "")
	if rec.Code != 200 || m["interval_source"] != "default" || m["min_interval_ms"] != float64(1000) || m["state"] != "over_limit_b" {
		t.Errorf("domain runtime: %d %v", rec.Code, m)
	}
}

func TestQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan struct{}, 16)
		f := &fakeFetcher{fn: func(ctx context.Context, u *url.URL, adm *limiter.Admission) *downloader.Outcome {
			started <- struct{}{}
			<-release
			return &downloader.Outcome{HTTPStatus: 200}
		}}
		h := newHarness(t, f)
		h.gate.SetCapacity(1)
		var wg sync.WaitGroup
		// one in flight, two queued (queue length 2)
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.do(t, "POST", "/v1/probe", `{"url":"http://q`+string(rune('a'+i))+`.test/","min_interval_ms":0}`)
			}()
		}
		<-started
		synctest.Wait() // the two other requests are blocked in the queue
		if n := h.gate.Waiting(); n != 2 {
			t.Fatalf("%d requests queued, want 2", n)
		}
		_, m := h.do(t, "POST", "/v1/probe", `{"url":"http://qz.test/","min_interval_ms":0}`)
		if m["fail_reason"] != "local_queue_full" || m["has_reached_origin"] != false {
			t.Errorf("probe with queue full: %v", m)
		}
		rec, m := h.do(t, "POST", "/v1/render", `{"url":"http://qy.test/","min_interval_ms":0}`)
		if rec.Code != 429 || m["fail_reason"] != "local_queue_full" {
			t.Errorf("render with queue full: %d %v", rec.Code, m)
		}
		// The refused render gave its admission back: the domain is free again.
		if st, ok := h.lim.Domain(h.clk.Now(), "qy.test"); !ok || st.InFlightCount != 0 {
			t.Errorf("qy.test state after refusal: %+v", st)
		}
		close(release)
		wg.Wait()
	})
}

func TestSettingsTakeEffectAndPersist(t *testing.T) {
	h := newHarness(t, &fakeFetcher{})
	rec, m := h.do(t, "PUT", "/v1/settings", `{"max_concurrent_count":7}`)
	if rec.Code != 200 || m["max_concurrent_count"] != float64(7) {
		t.Fatalf("put: %d %v", rec.Code, m)
	}
	if h.gate.Capacity() != 7 {
		t.Errorf("gate capacity = %d", h.gate.Capacity())
	}
	if s, ok, _ := h.set.Settings(context.Background()); !ok || s.MaxConcurrentCount != 7 {
		t.Errorf("stored = %v %v", s, ok)
	}
	// A restart: a new engine on the same settings store starts with 7.
	h2 := newHarness(t, &fakeFetcher{})
	if s, ok, _ := h.set.Settings(context.Background()); ok {
		_ = h2.set.SaveSettings(context.Background(), s)
	}
	eng := engine.New(engine.Config{Clock: h2.clk, Limiter: h2.lim, Gate: h2.gate, Fetcher: &fakeFetcher{}, Settings: h.set})
	if err := eng.LoadSettings(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h2.gate.Capacity() != 7 {
		t.Errorf("after restart capacity = %d, want 7", h2.gate.Capacity())
	}
}

func TestDomainNotFoundAndHealth(t *testing.T) {
	h := newHarness(t, &fakeFetcher{})
	if rec, _ := h.do(t, "GET", "/v1/domains/unknown.test", ""); rec.Code != 404 {
		t.Errorf("unknown domain: %d", rec.Code)
	}
	if rec, _ := h.do(t, "GET", "/healthz", ""); rec.Code != 200 {
		t.Errorf("healthz: %d", rec.Code)
	}
	if rec, _ := h.do(t, "GET", "/readyz", ""); rec.Code != 503 {
		t.Errorf("readyz before ready: %d", rec.Code)
	}
	h.srv.SetReady(true)
	if rec, _ := h.do(t, "GET", "/readyz", ""); rec.Code != 200 {
		t.Errorf("readyz when ready: %d", rec.Code)
	}
}

func TestPanicIs500(t *testing.T) {
	h := newHarness(t, &fakeFetcher{fn: func(context.Context, *url.URL, *limiter.Admission) *downloader.Outcome {
		panic("boom: secret detail")
	}})
	rec, m := h.do(t, "POST", "/v1/probe", `{"url":"http://p.test/","min_interval_ms":0}`)
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") || m["error"] != "internal error" {
		t.Errorf("panic answer: %d %s", rec.Code, rec.Body.String())
	}
	// The panicking request released its global slot and admission.
	if h.gate.InFlight() != 0 {
		t.Errorf("gate in flight after panic = %d", h.gate.InFlight())
	}
}

// TestMuxErrorsAreJSON: a wrong method (405, with Allow) and an unknown path (404) answer
// the JSON error body, like every other error.
func TestMuxErrorsAreJSON(t *testing.T) {
	srv := New(Config{})
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/v1/probe", http.StatusMethodNotAllowed},
		{"DELETE", "/v1/settings", http.StatusMethodNotAllowed},
		{"GET", "/v1/nothing", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		var body errorBody
		if rec.Code != tt.want || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Errorf("%s %s: %d %q, want %d JSON", tt.method, tt.path, rec.Code, rec.Header().Get("Content-Type"), tt.want)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error == "" {
			t.Errorf("%s %s: body %q is not the JSON error body", tt.method, tt.path, rec.Body.String())
		}
		if tt.want == http.StatusMethodNotAllowed && rec.Header().Get("Allow") == "" {
			t.Errorf("%s %s: no Allow header", tt.method, tt.path)
		}
	}
}

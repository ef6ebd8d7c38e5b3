package engine

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/fetch"
	"downloader/internal/nginxtest"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/store/embedded/embeddedtest"
)

// nginxEngine is the engine with the real fetcher at s (every *.example.com on 443 is
// nginx's TLS port, on 80 its plain one; the test CA trusted), the real embedded store and
// a fake clock for the limiter's decisions. tweak adjusts the fetcher's config.
func nginxEngine(t testing.TB, s *nginxtest.Server, tweak func(*fetch.Config)) (*Engine, *clocktest.Fake, *fetch.Fetcher) {
	t.Helper()
	var rules []netguard.Rule
	for _, r := range []string{"*.example.com:443:" + s.HTTPSAddr, "*.example.com:80:" + s.HTTPAddr} {
		rule, err := netguard.ParseConnectTo(r)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, rule)
	}
	cfg := fetch.Config{Guard: netguard.New(netguard.Config{ConnectTo: rules}), TLSConfig: &tls.Config{RootCAs: s.CA.Pool()}}
	if tweak != nil {
		tweak(&cfg)
	}
	f := fetch.New(cfg)
	t.Cleanup(f.Close)
	st := embeddedtest.Open(t, t.TempDir())
	clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
	lim := limiter.New(clk)
	clk.Advance(time.Hour)
	e := New(Config{Clock: clk, Limiter: lim, Gate: limiter.NewGate(8, 8), Fetcher: f, Pages: st, Results: st,
		DefaultMinInterval: 0, DefaultTimeout: 10 * time.Second})
	return e, clk, f
}

// nginxLog is nginx's access log once every request answered so far is in it. nginx
// (one worker) writes a request's line in the same event as the end of its answer, so
// the line may lag the client by a moment; once a later request on a new connection was
// answered, every earlier line is written. The marker requests (GET /, from a client of
// their own, which the tests here never ask for otherwise) are left out.
func nginxLog(t *testing.T, s *nginxtest.Server) []nginxtest.Request {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.CA.Pool()}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+s.HTTPSAddr+"/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("marker request: %v", err)
	}
	resp.Body.Close()
	var reqs []nginxtest.Request
	for _, r := range s.Requests() {
		if r.URI != "/" { // the markers' (and readiness') lines, the last one maybe not yet
			reqs = append(reqs, r)
		}
	}
	return reqs
}

// TestNginxConditionalRecrawl: a stored plain fetch of a static file from the real nginx
// keeps its validators; the next stored fetch of the URL is conditional, and nginx's own
// 304 is a success (http_status 304, fail_reason null, reached, is_not_modified) that
// keeps the stored page and returns its key and content (SPEC §4, §5), over HTTP/2 and
// over HTTP/1.1.
func TestNginxConditionalRecrawl(t *testing.T) {
	const page = "<!doctype html><html><body><p>an unchanged static page</p></body></html>"
	s := nginxtest.Start(t, map[string][]byte{"static.html": []byte(page)})
	for _, tc := range []struct {
		name, host, version, logProtocol string
		isHTTP2Off                       bool
	}{{"http2", "h2", "2", "HTTP/2.0", false}, {"http1.1", "h1", "1.1", "HTTP/1.1", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e, _, _ := nginxEngine(t, s, func(c *fetch.Config) { c.DisableHTTP2 = tc.isHTTP2Off })
			raw := "https://" + tc.host + ".example.com/static.html"
			ms := func(n int64) *int64 { return &n }
			before := len(nginxLog(t, s))

			first := runAndStore(t, t.Context(), e, &downloader.Task{TaskID: tc.name + "-1", URL: raw, MinIntervalMs: ms(0), ShouldStore: true})
			r1 := first.Report
			if r1 == nil || r1.FailReason != nil || r1.HTTPStatus == nil || *r1.HTTPStatus != 200 || r1.PageKey == "" || r1.HealthSignal.IsNotModified {
				t.Fatalf("first fetch: %+v ", r1)
			}
			if v := r1.HealthSignal.HTTPVersion; v == nil || *v != tc.version {
				t.Fatalf("first fetch over %v, want %s", v, tc.version)
			}

			second := runAndStore(t, t.Context(), e, &downloader.Task{TaskID: tc.name + "-2", URL: raw, MinIntervalMs: ms(0), ShouldStore: true})
			r2 := second.Report
			if r2 == nil || r2.FailReason != nil || !r2.HasReachedOrigin || r2.HTTPStatus == nil || *r2.HTTPStatus != 304 ||
				!r2.HealthSignal.IsNotModified || r2.PageKey != r1.PageKey || r2.HealthSignal.BodyBytes != 0 ||
				r2.RawTextLength == nil || *r1.RawTextLength != *r2.RawTextLength {
				t.Fatalf("recrawl: %+v (health_signal %+v), want nginx's 304 as a success keeping page %s", r2, r2.HealthSignal, r1.PageKey)
			}
			if v := r2.HealthSignal.HTTPVersion; v == nil || *v != tc.version {
				t.Fatalf("recrawl over %v, want %s", v, tc.version)
			}

			// Entry B's answer to the same URL is the stored page's content.
			u, _ := url.Parse(raw)
			ans, err := e.Render(t.Context(), downloader.Request{URL: raw, Domain: u.Hostname(), ShouldStore: true}, u)
			if err != nil {
				t.Fatal(err)
			}
			if ans.PageKey != r1.PageKey || !ans.Summary.HealthSignal.IsNotModified || ans.HTML != page {
				t.Errorf("entry B recrawl: page_key %q, is_not_modified %v, html %q", ans.PageKey, ans.Summary.HealthSignal.IsNotModified, ans.HTML)
			}

			// nginx itself answered 200 once and then 304 twice, in the protocol asked for.
			got := nginxLog(t, s)[before:]
			want := []nginxtest.Request{{Protocol: tc.logProtocol, Status: 200, URI: "/static.html"}, {Protocol: tc.logProtocol, Status: 304, URI: "/static.html"}, {Protocol: tc.logProtocol, Status: 304, URI: "/static.html"}}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("nginx's access log: %+v, want %+v", got, want)
			}
		})
	}
}

// TestNginxRetryAfterHoldsTheDomain: nginx's limit_req answers the second request to its
// limited location 429 with Retry-After: 30. The engine holds the domain from then on
// (the fake clock decides): B is refused 429 with the remaining wait, C answers
// self_rate_limited, not reached, with it in health_signal.retry_after_seconds, A hands a
// task back whose lease ends inside the wait, and nothing reaches nginx meanwhile. Once
// the wait is over, the next request goes to nginx again.
func TestNginxRetryAfterHoldsTheDomain(t *testing.T) {
	s := nginxtest.Start(t, map[string][]byte{"limited/a.html": []byte("<p>a</p>"), "b.html": []byte("<p>b</p>")})
	e, clk, _ := nginxEngine(t, s, nil)
	ctx := t.Context()
	req := func(raw string, entry downloader.Entry) (downloader.Request, *url.URL) {
		u, _ := url.Parse(raw)
		return downloader.Request{URL: raw, Domain: u.Hostname(), Entry: entry, IntervalSource: downloader.IntervalSourceRequest}, u
	}
	limited := "https://www.example.com" + nginxtest.PathLimited + "a.html"
	before := len(nginxLog(t, s))

	r, u := req(limited, downloader.EntryProbe)
	if s := e.Probe(ctx, r, u); s.FailReason != nil || s.HTTPStatus == nil || *s.HTTPStatus != 200 {
		t.Fatalf("first request to the limited location: %+v", s)
	}
	s2 := e.Probe(ctx, r, u)
	if s2.HTTPStatus == nil || *s2.HTTPStatus != 429 || !s2.HasReachedOrigin || s2.HealthSignal == nil ||
		s2.HealthSignal.RetryAfterSeconds == nil || *s2.HealthSignal.RetryAfterSeconds != 30 {
		t.Fatalf("second request: %+v (health_signal %+v), want nginx's 429 with Retry-After 30", s2, s2.HealthSignal)
	}
	clk.Advance(10 * time.Second)

	// Another page of the same domain: the domain is held, not the URL.
	r, u = req("https://www.example.com/b.html", downloader.EntryRender)
	_, err := e.Render(ctx, r, u)
	var ol *downloader.OverLimitError
	if !errors.As(err, &ol) || ol.Reason != downloader.FailSelfRateLimited || ol.RetryAfterSeconds() != 20 {
		t.Fatalf("B during the wait: %v, want 429 self_rate_limited with 20 s left", err)
	}
	r, u = req("https://www.example.com/b.html", downloader.EntryProbe)
	s3 := e.Probe(ctx, r, u)
	if s3.FailReason == nil || *s3.FailReason != downloader.FailSelfRateLimited || s3.HasReachedOrigin || s3.HTTPStatus != nil ||
		s3.HealthSignal == nil || s3.HealthSignal.RetryAfterSeconds == nil || *s3.HealthSignal.RetryAfterSeconds != 20 {
		t.Fatalf("C during the wait: %+v (health_signal %+v)", s3, s3.HealthSignal)
	}
	ms := func(n int64) *int64 { return &n }
	a := e.RunTask(ctx, &downloader.Task{TaskID: "t", URL: "https://www.example.com/b.html", MinIntervalMs: ms(0), LeaseExpiresAt: clk.Now().Add(15 * time.Second)})
	if !a.Release || a.RetryAfter < 20*time.Second {
		t.Fatalf("A with a lease ending inside the wait: %+v, want handed back for at least 20 s", a)
	}

	want := []nginxtest.Request{{Protocol: "HTTP/2.0", Status: 200, URI: "/limited/a.html"}, {Protocol: "HTTP/2.0", Status: 429, URI: "/limited/a.html"}}
	if got := nginxLog(t, s)[before:]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("nginx's access log during the wait: %+v, want %+v (nothing after the 429)", got, want)
	}

	// The wait is over on our clock (nginx's own minute is not): the next request goes.
	clk.Advance(20 * time.Second)
	r, u = req("https://www.example.com/b.html", downloader.EntryProbe)
	if s := e.Probe(ctx, r, u); s.FailReason != nil || s.HTTPStatus == nil || *s.HTTPStatus != 200 {
		t.Fatalf("C after the wait: %+v", s)
	}
	want = append(want, nginxtest.Request{Protocol: "HTTP/2.0", Status: 200, URI: "/b.html"})
	if got := nginxLog(t, s)[before:]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("nginx's access log after the wait: %+v, want %+v", got, want)
	}
}

package render

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/security"

	"downloader"
	"downloader/clock"
	"downloader/clock/clocktest"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/origintest"
)

// limiterHops admits hops as the service's engine.Hops does: with the interval last used
// for the domain, or the default for a new one, waiting its turn within ctx.
type limiterHops struct {
	l               *limiter.Limiter
	defaultInterval time.Duration
}

func (h limiterHops) AdmitHop(ctx context.Context, domain string) (limiter.Admission, error) {
	interval, source, ok := h.l.IntervalOf(domain)
	if !ok {
		interval, source = h.defaultInterval, downloader.IntervalSourceDefault
	}
	return h.l.Wait(ctx, domain, interval, source, downloader.EntryRender)
}

// hopRecorder admits hops through limiterHops and records their domains.
type hopRecorder struct {
	hops limiterHops

	mu      sync.Mutex
	domains []string
}

func (h *hopRecorder) AdmitHop(ctx context.Context, domain string) (limiter.Admission, error) {
	h.mu.Lock()
	h.domains = append(h.domains, domain)
	h.mu.Unlock()
	return h.hops.AdmitHop(ctx, domain)
}

// take returns the domains recorded since the last take.
func (h *hopRecorder) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.domains
	h.domains = nil
	return d
}

// hopOrigin serves the redirecting pages of the hop tests, on a recording origin that
// stamps every arrival with the kernel's receive time.
func hopOrigin(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	page := func(body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><html><head><title>%s</title></head><body>%s</body></html>", host, body)
	}
	switch host + r.URL.Path {
	case "cross-a.test/":
		http.Redirect(w, r, "http://cross-b.test/landing", http.StatusFound)
	case "cross-b.test/landing":
		page("<p>Landed on another host after a redirect.</p>")
	case "same.test/":
		http.Redirect(w, r, "/final", http.StatusFound)
	case "same.test/final":
		page("<p>Landed on the same host after a redirect.</p>")
	case "refresh.test/":
		page(`<meta http-equiv="refresh" content="0; url=/next"><p>Moving on.</p>`)
	case "refresh.test/next":
		page("<p>Arrived by a meta refresh.</p>")
	case "embed.test/":
		page(`<p>A page with an embed.</p><iframe src="http://widget.test/embed"></iframe>`)
	case "embed-limited.test/":
		page(`<p>A page with an embed from a host that is never free.</p><iframe src="http://limited.test/"></iframe>`)
	case "widget.test/embed":
		page("<p>An embedded widget.</p>")
	case "far.test/":
		http.Redirect(w, r, "http://limited.test/", http.StatusFound)
	case "limited.test/":
		page("<p>This host must never be reached.</p>")
	default:
		http.NotFound(w, r)
	}
}

// hopEnv is a pool that admits hops through a recorder on a real limiter, and the origin.
type hopEnv struct {
	o   *origintest.Origin
	l   *limiter.Limiter
	rec *hopRecorder
	p   hopsPool
}

func newHopEnv(t *testing.T, defaultInterval time.Duration) *hopEnv {
	t.Helper()
	return newHopEnvWith(t, defaultInterval, hopOrigin)
}

// newHopEnvWith is newHopEnv on an origin serving handler.
func newHopEnvWith(t *testing.T, defaultInterval time.Duration, handler http.HandlerFunc) *hopEnv {
	t.Helper()
	f := getFixture(t)
	o := origintest.New(handler)
	t.Cleanup(o.Close)
	rule, err := netguard.ParseConnectTo(o.ConnectTo())
	if err != nil {
		t.Fatal(err)
	}
	guard := netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}, Resolver: fakeResolver{}, Dialer: loopbackOnly{f}})
	l := limiter.New(clock.Real{})
	rec := &hopRecorder{hops: limiterHops{l: l, defaultInterval: defaultInterval}}
	p, err := newHopsPool(Config{
		Concurrency: 1,
		WarmTabs:    1,
		UserAgent:   testUserAgent,
		Guard:       guard,
		Logger:      testLogger(t),
	}, onSharedBrowser(t, seams{}), rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &hopEnv{o: o, l: l, rec: rec, p: p}
}

// render renders u under an admission of its domain with interval, as entry A would.
func (e *hopEnv) render(t *testing.T, u string, interval, timeout time.Duration) *downloader.Outcome {
	t.Helper()
	pu := getFixture(t).url(u)
	domain, err := downloader.CanonicalHost(pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	// A new limiter treats every domain as requested at its start (SPEC §2): wait for that.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm, err := e.l.Wait(ctx, domain, interval, downloader.IntervalSourceRequest, downloader.EntryRender)
	if err != nil {
		t.Fatalf("%s not admitted: %v", domain, err)
	}
	out := e.p.Render(context.Background(), pu, &adm, timeout)
	checkCause(t, out)
	adm.Done()
	checkCause(t, out)
	return out
}

// arrival returns when the origin received the request for host and path.
func (e *hopEnv) arrival(t *testing.T, host, path string) time.Time {
	t.Helper()
	for _, a := range e.o.Arrivals() {
		if a.Host == host && a.Path == path {
			return a.At
		}
	}
	t.Fatalf("the origin saw no request for %s%s; it saw %v", host, path, e.o.Arrivals())
	return time.Time{}
}

func (e *hopEnv) requestCount(host string) uint64 {
	st, _ := e.l.Domain(time.Now(), host)
	return st.Request24hCount
}

// TestRenderHops: every main-frame document after the first (a redirect to another host,
// a redirect to the same host, a meta refresh) gets its own admission before it is sent,
// and a same-host hop arrives at the origin no sooner than the interval after the page's
// first request; a hop that cannot be admitted before the deadline ends the render with
// self_rate_limited and nothing is sent to its host; an iframe on another host whose turn
// is now is admitted like a hop.
func TestRenderHops(t *testing.T) {
	const defaultInterval = 200 * time.Millisecond
	e := newHopEnv(t, defaultInterval)

	t.Run("cross host", func(t *testing.T) {
		out := e.render(t, "cross-a.test/", 0, safetyTimeout(t))
		if out.FailReason != "" || out.HTTPStatus != 200 || out.FinalURL != "http://cross-b.test/landing" {
			t.Fatalf("fail_reason=%s http_status=%d final_url=%q", failReason(out), out.HTTPStatus, out.FinalURL)
		}
		if got := e.rec.take(); !slices.Equal(got, []string{"cross-b.test"}) {
			t.Errorf("hops admitted: %v, want [cross-b.test]", got)
		}
		for host, want := range map[string]uint64{"cross-a.test": 1, "cross-b.test": 1} {
			if got := e.requestCount(host); got != want {
				t.Errorf("%s: request_24h_count=%d, want %d", host, got, want)
			}
		}
		st, _ := e.l.Domain(time.Now(), "cross-b.test")
		if st.InFlightCount != 0 || st.IntervalSource != downloader.IntervalSourceDefault {
			t.Errorf("cross-b.test after the render: %+v, want nothing in flight and the default interval", st)
		}
		if out.HealthSignal.RedirectCount != 1 {
			t.Errorf("redirect_count=%d, want 1", out.HealthSignal.RedirectCount)
		}
	})

	for _, tt := range []struct {
		name, url, host, first, next string
	}{
		{"same host redirect", "same.test/", "same.test", "/", "/final"},
		{"meta refresh", "refresh.test/", "refresh.test", "/", "/next"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const interval = 400 * time.Millisecond
			out := e.render(t, tt.url, interval, safetyTimeout(t))
			if out.FailReason != "" || out.HTTPStatus != 200 || out.FinalURL != "http://"+tt.host+tt.next {
				t.Fatalf("fail_reason=%s http_status=%d final_url=%q", failReason(out), out.HTTPStatus, out.FinalURL)
			}
			if got := e.rec.take(); !slices.Equal(got, []string{tt.host}) {
				t.Errorf("hops admitted: %v, want [%s]", got, tt.host)
			}
			if got := e.requestCount(tt.host); got != 2 {
				t.Errorf("request_24h_count=%d, want 2", got)
			}
			gap := e.arrival(t, tt.host, tt.next).Sub(e.arrival(t, tt.host, tt.first))

			if gap < interval {
				t.Errorf("the origin saw %s %v after %s, want at least the interval %v", tt.next, gap, tt.first, interval)
			}
			if st, _ := e.l.Domain(time.Now(), tt.host); st.InFlightCount != 0 {
				t.Errorf("in_flight_count=%d after the render, want 0", st.InFlightCount)
			}
		})
	}

	t.Run("iframe on another host", func(t *testing.T) {
		out := e.render(t, "embed.test/", 0, safetyTimeout(t))
		if out.FailReason != "" || out.HTTPStatus != 200 {
			t.Fatalf("fail_reason=%s http_status=%d", failReason(out), out.HTTPStatus)
		}
		if got := e.rec.take(); !slices.Equal(got, []string{"widget.test"}) {
			t.Errorf("admitted: %v, want [widget.test]: the iframe's document", got)
		}
		if n := e.o.CountByHost()["widget.test"]; n != 1 {
			t.Errorf("the origin got %d requests for widget.test, want 1", n)
		}
	})

	t.Run("not admitted before the deadline", func(t *testing.T) {
		// limited.test's next slot is two hours away.
		now := time.Now()
		held, _, ok := e.l.Reserve(now, "limited.test", time.Hour, downloader.IntervalSourceRequest, downloader.EntryLease, time.Time{})
		if !ok {
			t.Fatal("no reservation")
		}
		held.Done()
		start := time.Now()
		out := e.render(t, "far.test/", 0, 10*time.Second)
		if out.FailReason != downloader.FailSelfRateLimited || out.HTTPStatus != 0 {
			t.Fatalf("fail_reason=%s http_status=%d, want self_rate_limited and none", failReason(out), out.HTTPStatus)
		}
		if out.Summary("far.test").HasReachedOrigin {
			t.Error("has_reached_origin=true, want false")
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("took %v: the refusal waited for the timeout", took)
		}
		if got := e.rec.take(); !slices.Equal(got, []string{"limited.test"}) {
			t.Errorf("hops asked for: %v, want [limited.test]", got)
		}
		if n := e.o.CountByHost()["limited.test"]; n != 0 {
			t.Errorf("the origin got %d requests for limited.test", n)
		}
		if got := e.requestCount("limited.test"); got != 1 {
			t.Errorf("limited.test: request_24h_count=%d, want only the reservation", got)
		}
	})
	getFixture(t).noViolations(t)
}

// TestRenderFramesAdmitNow: the service's frame mode (measured in BenchmarkRenderFrames)
// admits an iframe document on another host when its turn is now, and otherwise skips the
// iframe (counted in skipped_frame_count) while the page renders.
func TestRenderFramesAdmitNow(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	e := newHopEnv(t, 0)
	out := e.render(t, "embed.test/", 0, safetyTimeout(t))
	if out.FailReason != "" || deref(out.HealthSignal.SkippedFrameCount) != 0 {
		t.Fatalf("fail_reason=%s skipped_frame_count=%d", failReason(out), deref(out.HealthSignal.SkippedFrameCount))
	}
	if got := e.rec.take(); !slices.Equal(got, []string{"widget.test"}) {
		t.Errorf("admitted: %v, want [widget.test]", got)
	}
	if got := e.requestCount("widget.test"); got != 1 {
		t.Errorf("widget.test: request_24h_count=%d, want 1", got)
	}

	held, _, _ := e.l.Reserve(time.Now(), "limited.test", time.Hour, downloader.IntervalSourceRequest, downloader.EntryLease, time.Time{})
	held.Done()
	out = e.render(t, "embed-limited.test/", 0, safetyTimeout(t))
	if out.FailReason != "" || out.HTTPStatus != 200 || !strings.Contains(out.Text, "never free") {
		t.Fatalf("fail_reason=%s http_status=%d text=%q, want the page", failReason(out), out.HTTPStatus, out.Text)
	}
	if got := deref(out.HealthSignal.SkippedFrameCount); got != 1 {
		t.Errorf("skipped_frame_count=%d, want the iframe", got)
	}
	if got := deref(out.HealthSignal.BlockedRequestCount); got != 0 {
		t.Errorf("blocked_request_count=%d, want 0: nothing was refused by the guard", got)
	}
	if n := e.o.CountByHost()["limited.test"]; n != 0 {
		t.Errorf("the origin got %d requests for limited.test", n)
	}
}

// TestHopConnWaitsForTheWire: a write to a connection of a domain with an admitted hop
// is held until the hop's admission lets it out, which moves last_request_at to that
// moment; writes to other domains, and later writes, go at once; the render's end gives
// the admission back and ends a wait.
func TestHopConnWaitsForTheWire(t *testing.T) {
	const interval = time.Second
	clk := clocktest.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	l := limiter.New(clk)
	clk.Advance(interval) // past the start-up's conservative wait

	// The hop is admitted; then another request to the domain goes out at once (its
	// interval is 0), so the hop must wait a full interval after that one.
	hop, wait := l.Allow(clk.Now(), "x.test", interval, downloader.IntervalSourceRequest, downloader.EntryRender)
	if wait > 0 {
		t.Fatalf("hop not admitted: %v", wait)
	}
	other, wait := l.Allow(clk.Now(), "x.test", 0, downloader.IntervalSourceRequest, downloader.EntryProbe)
	if wait > 0 {
		t.Fatalf("other not admitted: %v", wait)
	}
	other.Wire(clk.Now())
	otherAt := clk.Now()

	st := newRenderState(clk, "page.test", nil)
	if !st.addHop("x.test", hop) {
		t.Fatal("addHop refused a live render")
	}
	never := make(chan struct{})
	dial := func(domain string) (*originConn, <-chan []byte) {
		client, server := net.Pipe()
		t.Cleanup(func() { client.Close(); server.Close() })
		got := make(chan []byte, 4)
		go func() {
			buf := make([]byte, 64)
			for {
				n, err := server.Read(buf)
				if err != nil {
					return
				}
				got <- append([]byte(nil), buf[:n]...)
			}
		}()
		return &originConn{Conn: client, st: st, domain: domain, stop: never}, got
	}

	y, yGot := dial("y.test")
	if _, err := y.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	<-yGot

	x, xGot := dial("x.test")
	written := make(chan error, 1)
	go func() {
		_, err := x.Write([]byte("GET / HTTP/1.1"))
		written <- err
	}()
	clk.WaitTimers(1)
	select {
	case b := <-xGot:
		t.Fatalf("%q went out before the hop's turn", b)
	default:
	}
	clk.Advance(interval)
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	<-xGot
	st1, _ := l.Domain(clk.Now(), "x.test")
	if want := otherAt.Add(interval); !st1.LastRequestAt.Equal(want) {
		t.Errorf("last_request_at=%v, want the hop's wire moment %v", st1.LastRequestAt, want)
	}
	// The hop is on the wire: the connection's next writes go at once.
	if _, err := x.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	<-xGot

	// A second hop, whose wait the render's end cuts short.
	clk.Advance(interval)
	hop2, wait := l.Allow(clk.Now(), "x.test", interval, downloader.IntervalSourceRequest, downloader.EntryRender)
	if wait > 0 {
		t.Fatalf("hop2 not admitted: %v", wait)
	}
	other2, _ := l.Allow(clk.Now(), "x.test", 0, downloader.IntervalSourceRequest, downloader.EntryProbe)
	other2.Wire(clk.Now())
	st.addHop("x.test", hop2)
	go func() {
		_, err := x.Write([]byte("GET /2 HTTP/1.1"))
		written <- err
	}()
	clk.WaitTimers(1)
	st.release()
	if err := <-written; err == nil {
		t.Error("a write waiting for its hop went out after the render's end")
	}
	other.Done()
	other2.Done()
	if st2, _ := l.Domain(clk.Now(), "x.test"); st2.InFlightCount != 0 {
		t.Errorf("in_flight_count=%d after the render's end, want 0 (hops given back)", st2.InFlightCount)
	}
	if st.addHop("x.test", limiter.Admission{}) {
		t.Error("addHop accepted a hop after the render's end")
	}
}

func TestWithDeadline(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	earlier, cancel := context.WithDeadline(context.Background(), at.Add(-time.Second))
	defer cancel()
	later, cancel2 := context.WithDeadline(context.Background(), at.Add(time.Second))
	defer cancel2()
	tests := []struct {
		name string
		ctx  context.Context
		want time.Time
	}{
		{"no deadline", context.Background(), at},
		{"an earlier one stays", earlier, at.Add(-time.Second)},
		{"a later one is cut", later, at},
	}
	for _, tt := range tests {
		if got, ok := withDeadline(tt.ctx, at).Deadline(); !ok || !got.Equal(tt.want) {
			t.Errorf("%s: deadline %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRequestDomain(t *testing.T) {
	tests := []struct {
		url, want string
		wantErr   bool
	}{
		{"http://Example.TEST:8080/a", "example.test", false},
		{"https://example.test./", "example.test", false},
		{"data:text/html,hi", "", true},
		{"http:///nohost", "", true},
	}
	for _, tt := range tests {
		got, err := requestDomain(&network.Request{URL: tt.url})
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("requestDomain(%q) = %q, %v; want %q (error: %v)", tt.url, got, err, tt.want, tt.wantErr)
		}
	}
}

// tlsRecord is a TLS record of type typ with n bytes of body.
func tlsRecord(typ byte, n int) []byte {
	return append([]byte{typ, 3, 3, byte(n >> 8), byte(n)}, make([]byte, n)...)
}

// TestRecordScanner: in a tunnel, the wait is before the first application data record,
// however the client's bytes are cut into writes.
func TestRecordScanner(t *testing.T) {
	hello := tlsRecord(recordHandshake, 300)
	ccs := tlsRecord(recordChangeCipherSpec, 1)
	finished12 := tlsRecord(recordHandshake, 40)
	data := tlsRecord(recordApplicationData, 100)
	cat := func(bs ...[]byte) []byte { return slices.Concat(bs...) }
	tests := []struct {
		name   string
		writes [][]byte
		want   [2]int // the write and the offset in it where data starts; {-1, -1}: none
	}{
		{"TLS 1.2: request after the handshake", [][]byte{hello, cat(tlsRecord(recordHandshake, 70), ccs, finished12), data}, [2]int{2, 0}},
		{"TLS 1.3: Finished and request in one write", [][]byte{hello, cat(ccs, tlsRecord(recordApplicationData, 53), data)}, [2]int{1, 6}},
		{"header split across writes", [][]byte{hello[:3], hello[3:200], cat(hello[200:], ccs[:2]), cat(ccs[2:], data)}, [2]int{3, 4}},
		{"reused tunnel: request first", [][]byte{hello, data, data}, [2]int{1, 0}},
		{"not TLS: the first write", [][]byte{[]byte("GET / HTTP/1.1\r\n")}, [2]int{0, 0}},
		{"alert counts as data", [][]byte{hello, tlsRecord(21, 2)}, [2]int{1, 0}},
		{"handshake only", [][]byte{hello, finished12}, [2]int{-1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s recordScanner
			got := [2]int{-1, -1}
			for i, w := range tt.writes {
				if s.inData() {
					break
				}
				if k := s.scan(w); k >= 0 {
					got = [2]int{i, k}
				}
			}
			if got != tt.want {
				t.Errorf("data starts at write %d offset %d, want %d, %d", got[0], got[1], tt.want[0], tt.want[1])
			}
		})
	}
}

// TestRenderHopsHTTPS: through CONNECT tunnels (TLS 1.3 to one host, TLS 1.2 to the
// other), the page's first request and each hop are admitted, and each admission is
// wired after the origin got the tunnel's TLS ClientHello, never at the dial.
func TestRenderHopsHTTPS(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	f := getFixture(t)
	var mu sync.Mutex
	hello := map[string]time.Time{} // first ClientHello per server name
	tls12 := false
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Host + r.URL.Path {
		case "secure.test/":
			http.Redirect(w, r, "/final", http.StatusFound)
		case "secure.test/final":
			http.Redirect(w, r, "https://secure-b.test/", http.StatusFound)
		case "hsts.dev/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, "<!doctype html><html><body><p>Upgraded by the browser.</p></body></html>")
		default:
			mu.Lock()
			tls12 = r.TLS != nil && r.TLS.Version == tls.VersionTLS12
			mu.Unlock()
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, "<!doctype html><html><body><p>Two hops away, over TLS.</p></body></html>")
		}
	}))
	srv.TLS = &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		mu.Lock()
		if _, ok := hello[h.ServerName]; !ok {
			hello[h.ServerName] = time.Now()
		}
		mu.Unlock()
		if h.ServerName == "secure-b.test" {
			c := srv.TLS.Clone()
			c.GetConfigForClient = nil
			c.MaxVersion = tls.VersionTLS12
			return c, nil
		}
		return nil, nil
	}}
	// The browser's first handshake to each host ends with an unknown-certificate alert;
	// it then proceeds under the ignore setting, on a new connection.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	guard := netguard.New(netguard.Config{
		ConnectTo: []netguard.Rule{mustRule("secure.test:443:127.0.0.1:" + port), mustRule("secure-b.test:443:127.0.0.1:" + port),
			mustRule("hsts.dev:443:127.0.0.1:" + port)},
		Resolver: fakeResolver{}, Dialer: loopbackOnly{f},
	})
	l := limiter.New(clock.Real{})
	rec := &hopRecorder{hops: limiterHops{l: l}}
	p, err := newHopsPool(Config{Concurrency: 1, WarmTabs: -1, UserAgent: testUserAgent, Guard: guard, Logger: testLogger(t)}, seams{}, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), safetyTimeout(t))
	defer cancel()
	b, err := p.browserFor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The test server's certificate is for no .test name.
	if _, err := cdp.Call(ctx, b.b, security.SetIgnoreCertificateErrors, security.SetIgnoreCertificateErrorsParams{Ignore: true}); err != nil {
		t.Fatal(err)
	}

	const interval = 300 * time.Millisecond
	adm, err := l.Wait(ctx, "secure.test", interval, downloader.IntervalSourceRequest, downloader.EntryRender)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out := p.Render(context.Background(), f.url("https://secure.test/"), &adm, safetyTimeout(t))
	checkCause(t, out)
	adm.Done()
	if out.FailReason != "" || out.HTTPStatus != 200 || out.FinalURL != "https://secure-b.test/" {
		t.Fatalf("fail_reason=%s http_status=%d final_url=%q", failReason(out), out.HTTPStatus, out.FinalURL)
	}
	if got := rec.take(); !slices.Equal(got, []string{"secure.test", "secure-b.test"}) {
		t.Errorf("hops admitted: %v, want [secure.test secure-b.test]", got)
	}
	// The same-host hop waited its interval after the first request went out.
	if took := time.Since(start); took < interval {
		t.Errorf("the render took %v, less than the same-host hop's interval %v", took, interval)
	}
	// The whole .dev zone is HSTS-preloaded: the browser turns http:// into https:// by
	// itself, an internal redirect before anything went out, which the caller's admission
	// covers (asking for another would wait a second interval).
	hsts, err := l.Wait(ctx, "hsts.dev", 0, downloader.IntervalSourceRequest, downloader.EntryRender)
	if err != nil {
		t.Fatal(err)
	}
	out = p.Render(context.Background(), f.url("http://hsts.dev/"), &hsts, safetyTimeout(t))
	checkCause(t, out)
	hsts.Done()
	if out.FailReason != "" || out.FinalURL != "https://hsts.dev/" {
		t.Errorf("hsts.dev: fail_reason=%s final_url=%q", failReason(out), out.FinalURL)
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("hsts.dev: hops admitted %v, want none: the upgrade is the caller's request", got)
	}

	mu.Lock()
	defer mu.Unlock()
	if !tls12 {
		t.Error("secure-b.test was not reached over TLS 1.2")
	}
	for _, host := range []string{"secure.test", "secure-b.test"} {
		st, _ := l.Domain(time.Now(), host)
		if st.Request24hCount != map[string]uint64{"secure.test": 2, "secure-b.test": 1}[host] || st.InFlightCount != 0 {
			t.Errorf("%s: %+v", host, st)
		}
		if h, ok := hello[host]; !ok || !st.LastRequestAt.After(h) {
			t.Errorf("%s: last wire moment %v is not after the tunnel's ClientHello reached the origin at %v", host, st.LastRequestAt, h)
		}
	}
}

// TestPauserPausesOnlyWhatItDecides: over plain http, a tab with a pauser pauses its
// documents (and the skipped types) only, one CDP round trip each, and its sub-requests go
// unpaused to the proxy, which counts them under the render's caps: the documents the
// pauser let through (the page, a same-host iframe the pauser counts itself) are counted
// once, so exactly the total cap of sub-requests reaches the origin.
func TestPauserPausesOnlyWhatItDecides(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	const total, fetches = 4, 7
	f := getFixture(t)
	o := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch {
		case r.URL.Path == "/":
			fmt.Fprint(w, `<!doctype html><html><body><p>A page with a frame and a burst.</p><p id="n"></p>
<iframe src="/frame"></iframe>
<script>
let ok = 0;
const all = [];
for (let i = 0; i < `+fmt.Sprint(fetches)+`; i++) all.push(fetch("/api/" + i).then(r => { if (r.ok) ok++; }, () => {}));
Promise.all(all).then(() => { document.getElementById("n").textContent = "answered " + ok; });
</script></body></html>`)
		case r.URL.Path == "/frame":
			fmt.Fprint(w, `<p>frame</p>`)
		case strings.HasPrefix(r.URL.Path, "/api/"):
			fmt.Fprint(w, `{}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(o.Close)
	rule, err := netguard.ParseConnectTo(o.ConnectTo())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sent := make(map[string]int)
	l := limiter.New(clock.Real{})
	p, err := newHopsPool(Config{
		Concurrency: 1, WarmTabs: 1, UserAgent: testUserAgent, Logger: testLogger(t),
		Guard:              netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}, Resolver: fakeResolver{}, Dialer: loopbackOnly{f}}),
		MaxSubrequestCount: total,
		Trace: &Trace{CDPMessagef: func(format string, args ...any) {
			if msg, ok := args[0].([]byte); ok && strings.HasPrefix(format, "->") {
				for _, m := range []string{"Fetch.continueRequest", "Fetch.failRequest"} {
					if strings.Contains(string(msg), `"method":"`+m+`"`) {
						mu.Lock()
						sent[m]++
						mu.Unlock()
					}
				}
			}
		}},
		// Its own browser: Trace.CDPMessagef reads the local browser's pipe, whose debug
		// lines are all messages (a websocket's also tell of its control frames).
	}, seams{}, limiterHops{l: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	e := &hopEnv{o: o, l: l, p: p}
	mu.Lock()
	clear(sent) // the warm tab's own
	mu.Unlock()
	out := e.render(t, "paused.test/", 0, safetyTimeout(t))
	if out.FailReason != "" || out.HTTPStatus != 200 {
		t.Fatalf("fail_reason=%s http_status=%d", failReason(out), out.HTTPStatus)
	}
	frames, apis := 0, 0
	for _, a := range o.Arrivals() {
		switch {
		case a.Path == "/frame":
			frames++
		case strings.HasPrefix(a.Path, "/api/"):
			apis++
		}
	}
	if frames != 1 || frames+apis != total {
		t.Errorf("the origin got the frame %d times and %d API requests, want the frame once and %d sub-requests in all", frames, apis, total)
	}
	if n := deref(out.HealthSignal.CappedSubrequestCount); n != 1+fetches-total {
		t.Errorf("capped_subrequest_count=%d, want %d", n, 1+fetches-total)
	}
	mu.Lock()
	defer mu.Unlock()
	if sent["Fetch.continueRequest"] != 2 || sent["Fetch.failRequest"] != 0 {
		t.Errorf("paused requests answered: %v, want 2 continued (the page, its frame) and none failed", sent)
	}
}

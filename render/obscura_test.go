package render

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
)

// obscuraSetup is a pool on the relay (Obscura's behaviours in front of real Chromium).
// With isGuarded the relay's server has our guard proxy as its own proxy, as
// `obscura serve --proxy` pointed at it; without, its own proxy is the open network, as
// an Obscura started without --proxy reaches the origin directly.
type obscuraSetup struct {
	p     hopsPool
	net   *openNetwork
	relay *obscuraRelay
	hops  *hopRecorder
}

func newObscuraSetup(t *testing.T, isGuarded bool, concurrency int) *obscuraSetup {
	t.Helper()
	f := getFixture(t)
	n := newOpenNetwork(t)
	ln := listenLoopback(t)
	proxy := n.proxyURL()
	if isGuarded {
		proxy = "http://" + ln.Addr().String()
	}
	relay := newObscuraRelay(t, startProxiedBrowser(t, proxy))
	hops := &hopRecorder{hops: limiterHops{l: limiter.New(clock.Real{})}}
	p, err := newHopsPool(Config{
		Endpoint:    relay.url(),
		Concurrency: concurrency,
		QueueLength: 2,
		UserAgent:   testUserAgent,
		Guard:       f.guard,
		Logger:      testLogger(t),
	}, seams{guardProxyLn: ln}, hops)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &obscuraSetup{p: p, net: n, relay: relay, hops: hops}
}

// TestObscuraRefusedAroundTheGuard: an endpoint that ignores our per-context proxy and
// has none of ours of its own is refused at connect time: renders answer
// renderer_unavailable at once, the stats say why, and not one request reached an origin
// (counted at the open network's origin, and at ours).
func TestObscuraRefusedAroundTheGuard(t *testing.T) {
	t.Parallel() // owns its fixture and pool (parallelTests)
	f := ownFixture(t)
	s := newObscuraSetup(t, false, 1)
	mark := f.mark()
	for range 2 {
		out := render(t, s.p, "js.test/", 20*time.Second)
		if out.FailReason != downloader.FailRendererUnavailable || out.Summary("js.test").HasReachedOrigin {
			t.Errorf("fail_reason=%s, want renderer_unavailable with has_reached_origin=false", failReason(out))
		}
	}
	st := s.p.Stats()
	if !st.IsGuardRefused || st.RendererKind != string(RendererObscura) || !strings.Contains(st.LastError, "around our guard") {
		t.Errorf("stats %+v: want the endpoint refused as an obscura one, and why", st)
	}
	if got := s.net.unguardedCount(); got != 0 {
		t.Errorf("%d requests reached an origin around the guard: %v", got, s.net.unguarded())
	}
	if got := len(f.requestsTo("js.test", mark)); got != 0 {
		t.Errorf("%d requests reached js.test (around the guard or through it) from a refused endpoint", got)
	}
	if n := s.relay.navCount.Load(); n < 1 {
		t.Errorf("the canary never navigated (nav_count %d)", n)
	}
}

// TestObscuraRenders: once the server's own proxy is our guard proxy, renders give the
// page's text, hops are admitted, the origin sees our user agent, no Fetch.enable and no
// Emulation user agent is sent, failures are classified (a refused connection is the
// origin's, not a crash), and nothing goes around the guard.
func TestObscuraRenders(t *testing.T) {
	t.Parallel() // owns its fixture and pool (parallelTests)
	f := ownFixture(t)
	s := newObscuraSetup(t, true, 2)
	mark := f.mark()
	out := render(t, s.p, "js.test/", 20*time.Second)
	if out.FailReason != "" || deref(out.TextLength) <= deref(out.RawTextLength) {
		t.Fatalf("js.test: fail_reason=%s text_length=%d raw_text_length=%d, want the rendered article",
			failReason(out), deref(out.TextLength), deref(out.RawTextLength))
	}
	reqs := f.requestsTo("js.test", mark)
	if len(reqs) < 2 {
		t.Errorf("js.test saw %d requests through the guard, want the page and its XHRs", len(reqs))
	}
	for _, r := range reqs {
		if ua := r.Header.Get("User-Agent"); ua != testUserAgent {
			t.Errorf("%s: User-Agent %q, want ours", r.URL, ua)
		}
	}
	if st := s.p.Stats(); st.IsGuardRefused || st.RendererKind != string(RendererObscura) {
		t.Errorf("stats %+v: want an accepted obscura endpoint", st)
	}

	out = render(t, s.p, "redirect.test/", 20*time.Second)
	if out.FailReason != "" || !strings.HasPrefix(out.FinalURL, "http://js.test/") {
		t.Errorf("redirect.test: fail_reason=%s final_url=%s, want js.test's page", failReason(out), out.FinalURL)
	}
	s.hops.mu.Lock()
	hopped := slices.Contains(s.hops.domains, "js.test")
	s.hops.mu.Unlock()
	if !hopped {
		t.Errorf("hops admitted %v, want js.test (redirect.test's hop)", s.hops.domains)
	}

	for _, tt := range []struct {
		url  string
		want downloader.FailReason
	}{
		{"refused.test/", downloader.FailConnectRefused},
		{"https://refused.test/", downloader.FailConnectRefused},
		{"status.test/missing", downloader.FailHTTPStatusError},
	} {
		out := render(t, s.p, tt.url, 20*time.Second)
		if out.FailReason != tt.want {
			t.Errorf("%s: fail_reason=%s, want %s", tt.url, failReason(out), tt.want)
		}
	}
	// The failures are found by our own request of the chain (resolveChain), before the
	// server is asked to navigate; a CDP navigation error is classified as
	// TestClassifyNavigationError shows.
	if n := s.relay.navErrorCount.Load(); n != 0 {
		t.Errorf("nav_error_count %d, want 0: the failed pages were navigated to", n)
	}
	if n, u := s.relay.fetchEnableCount.Load(), s.relay.userAgentNoopCount.Load(); n != 0 || u != 0 {
		t.Errorf("fetch_enable_count=%d user_agent_noop_count=%d, want 0 and 0 on Obscura's profile", n, u)
	}
	if got := s.net.unguardedCount(); got != 0 {
		t.Errorf("%d requests went around the guard: %v", got, s.net.unguarded())
	}
	// The text above was right with Obscura's late events: the navigations' events in one
	// batch, the XHRs reported only once finished (TestRelayBatchesEvents).
	if b, l := s.relay.batchedCount.Load(), s.relay.lateScriptCount.Load(); b == 0 || l == 0 {
		t.Errorf("batched_count=%d late_script_count=%d, want both > 0: the relay did not delay the events", b, l)
	}
	f.noViolations(t)
}

// TestObscuraConcurrentRendersDoNotFreeze: Obscura holds every command of a connection
// while one of its navigations runs; with a connection per render, a render whose page
// never answers does not hold up another.
func TestObscuraConcurrentRendersDoNotFreeze(t *testing.T) {
	t.Parallel() // owns its fixture and pool (parallelTests)
	f := ownFixture(t)
	s := newObscuraSetup(t, true, 2)
	if out := render(t, s.p, "js.test/", 20*time.Second); out.FailReason != "" { // warm up
		t.Fatalf("first render: fail_reason=%s", failReason(out))
	}
	for len(f.hangHit) > 0 {
		<-f.hangHit
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hanging := make(chan *downloader.Outcome, 1)
	go func() { hanging <- s.p.Render(ctx, f.url("hang.test/"), nil, 30*time.Second) }()
	select {
	case <-f.hangHit:
	case <-time.After(20 * time.Second):
		t.Fatal("the hanging render did not reach its origin")
	}
	out := render(t, s.p, "js.test/", 20*time.Second)
	if out.FailReason != "" || deref(out.TextLength) <= deref(out.RawTextLength) {
		t.Errorf("a render beside a hanging one: fail_reason=%s text_length=%d, want the full page", failReason(out), deref(out.TextLength))
	}
	cancel()
	<-hanging
	if n := s.relay.connCount.Load(); n < 3 {
		t.Errorf("connection_count %d, want one per render besides the pool's own", n)
	}
	// The relay stops a connection's other pages at each navigation start, as Obscura
	// does (TestRelaySuspendsOtherPages shows it on a shared connection): with a
	// websocket per render, no render's page was ever stopped.
	if n := s.relay.suspendCount.Load(); n != 0 {
		t.Errorf("suspend_count %d, want 0: a render's page shared its connection", n)
	}
}

// TestObscuraConnectionDropped: Obscura sends no Inspector.targetCrashed: a server that
// dies mid-render is only its websocket lost. The render answers renderer_crashed (or
// renderer_unavailable, SPEC §4) at once, not at its timeout, and the next render gets a
// connection of its own and the page.
func TestObscuraConnectionDropped(t *testing.T) {
	t.Parallel() // owns its fixture and pool (parallelTests)
	f := ownFixture(t)
	s := newObscuraSetup(t, true, 1)
	if out := render(t, s.p, "js.test/", 20*time.Second); out.FailReason != "" { // connected, canary passed
		t.Fatalf("first render: fail_reason=%s", failReason(out))
	}
	for len(f.slowHit) > 0 {
		<-f.slowHit
	}
	done := make(chan *downloader.Outcome, 1)
	go func() { done <- s.p.Render(context.Background(), f.url("slowxhr.test/"), nil, 120*time.Second) }()
	select {
	case <-f.slowHit: // the page loaded and waits for its XHR
	case <-time.After(20 * time.Second):
		t.Fatal("the render never reached its slow XHR")
	}
	if n := s.relay.dropConnections(); n < 1 {
		t.Fatalf("dropped %d connections", n)
	}
	var out *downloader.Outcome
	select {
	case out = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the render did not end when its connection was lost")
	}
	if out.FailReason != downloader.FailRendererCrashed && out.FailReason != downloader.FailRendererUnavailable {
		t.Errorf("fail_reason=%s, want renderer_crashed or renderer_unavailable", failReason(out))
	}
	// The pool then connects again. A render that comes before it has seen the endpoint's
	// own connection go may still be handed the lost one (renderer_crashed, as it is); the
	// one after must render.
	out = render(t, s.p, "js.test/", 30*time.Second)
	if out.FailReason == downloader.FailRendererCrashed || out.FailReason == downloader.FailRendererUnavailable {
		out = render(t, s.p, "js.test/", 30*time.Second)
	}
	if out.FailReason != "" {
		t.Errorf("the render after the drop: fail_reason=%s", failReason(out))
	}
}

package render

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/inspector"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// These tests check that obscuraRelay does what docs/renderers.md says Obscura does, on
// the wire, with chromedp alone: the renderer's tests against the relay are only as good
// as this.

// relaySetup is a Chromium whose own proxy is the open network, the relay in front of
// it, and a chromedp browser connected to the relay.
type relaySetup struct {
	net   *openNetwork
	relay *obscuraRelay
	ctx   context.Context // a chromedp context on the relay, no tab yet
}

func newRelaySetup(t *testing.T) *relaySetup {
	t.Helper()
	n := newOpenNetwork(t)
	relay := newObscuraRelay(t, startProxiedBrowser(t, n.proxyURL()))
	a := &remoteAllocator{endpoint: relay.url(), dialTimeout: 20 * time.Second}
	actx, acancel := chromedp.NewAllocatorContext(context.Background(), a)
	bctx, bcancel := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil { // connects
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bcancel()
		acancel()
		a.Wait()
	})
	return &relaySetup{net: n, relay: relay, ctx: bctx}
}

// tab opens a tab in a new browser context of its own; proxy, when set, is the proxy the
// context asks for.
func (s *relaySetup) tab(t *testing.T, proxy string, opts ...chromedp.ContextOption) context.Context {
	t.Helper()
	opts = append(opts, chromedp.WithNewBrowserContext(func(p *target.CreateBrowserContextParams) {
		if proxy != "" {
			p.ProxyServer = proxy
			p.ProxyBypassList = "<-loopback>"
		}
	}))
	ctx, cancel := chromedp.NewContext(s.ctx, opts...)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return ctx
}

func bodyText(t *testing.T, ctx context.Context) string {
	t.Helper()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// TestRelayIgnoresProxyServer: a context created with our proxy as its proxyServer
// sends its requests through the server's own proxy instead; ours is never dialled.
func TestRelayIgnoresProxyServer(t *testing.T) {
	t.Parallel() // owns its fixture and browser (parallelTests)
	ownFixture(t)
	s := newRelaySetup(t)
	ours, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dialled atomic.Int64
	go func() {
		for {
			c, err := ours.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	defer ours.Close()

	ctx := s.tab(t, "http://"+ours.Addr().String())
	if err := chromedp.Do(ctx, chromedp.Navigate("http://js.test/relay/script.html")); err != nil {
		t.Fatal(err)
	}
	if got := s.net.unguarded()["js.test"]; got < 1 {
		t.Errorf("requests to js.test around the guard = %d, want >= 1", got)
	}
	if n := dialled.Load(); n != 0 {
		t.Errorf("our proxy was dialled %d times, want 0: the relay did not drop proxyServer", n)
	}
	if n := s.relay.ignoredProxyCount.Load(); n != 1 {
		t.Errorf("ignored_proxy_count = %d, want 1", n)
	}
}

// TestRelayFetchEnableAsObscura: our Document pattern becomes a block list: the
// external script is failed without a pause, the document is not paused, and the XHR is
// paused though no pattern asked for it.
func TestRelayFetchEnableAsObscura(t *testing.T) {
	t.Parallel() // owns its fixture and browser (parallelTests)
	ownFixture(t)
	s := newRelaySetup(t)
	paused := make(chan network.ResourceType, 16)
	var ctx context.Context
	ctx = s.tab(t, "", chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			paused <- e.ResourceType
			go chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID})
		}
	}))
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: documentPatternsForTest()}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://js.test/relay/script.html")); err != nil {
		t.Fatal(err)
	}
	select {
	case rt := <-paused:
		if rt != network.ResourceTypeXHR {
			t.Errorf("first pause for %s, want XHR", rt)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the XHR was never paused")
	}
	text := bodyText(t, ctx)
	if strings.Contains(text, "external script ran") {
		t.Errorf("text %q: the external script ran, want it blocked", text)
	}
	if !strings.Contains(text, "Static text") {
		t.Errorf("text %q: want the static text", text)
	}
	if s.net.unguarded()["js.test"] < 1 || s.relay.blockedCount.Load() < 1 || s.relay.documentPauseCount.Load() < 1 {
		t.Errorf("blocked_count=%d document_pause_count=%d, want both >= 1",
			s.relay.blockedCount.Load(), s.relay.documentPauseCount.Load())
	}
}

// documentPatternsForTest is a Document pattern as the pauser sends it.
func documentPatternsForTest() []*fetch.RequestPattern {
	return []*fetch.RequestPattern{{URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest}}
}

// TestRelaySerialisesNavigations: while one tab of a connection navigates, the other
// tab's commands are held back (the excess answered "Server busy"), and go on once the
// navigation has loaded.
func TestRelaySerialisesNavigations(t *testing.T) {
	t.Parallel() // owns its fixture and browser (parallelTests)
	ownFixture(t)
	s := newRelaySetup(t)
	s.relay.maxDeferred = 1
	a, b := s.tab(t, ""), s.tab(t, "")
	navDone := make(chan error, 1)
	go func() { navDone <- chromedp.Do(a, chromedp.Navigate("http://js.test/relay/wait")) }()
	select {
	case <-s.net.waitHit:
	case <-time.After(20 * time.Second):
		t.Fatal("the navigation did not reach the origin")
	}
	evalDone := make(chan error, 1)
	go func() {
		_, err := chromedp.Run(b, chromedp.Evaluate[int](`1+1`))
		evalDone <- err
	}()
	select {
	case <-s.relay.held:
	case <-time.After(20 * time.Second):
		t.Fatal("the second tab's command was not held")
	}
	// The one deferred slot is taken: the next command is refused at once.
	_, err := chromedp.Call(b, runtime.Evaluate, runtime.EvaluateParams{Expression: `2+2`})
	var cerr *cdproto.Error
	if !errors.As(err, &cerr) || !strings.Contains(cerr.Message, "Server busy") {
		t.Errorf("a command past the deferred cap: err=%v, want Server busy", err)
	}
	select {
	case err := <-evalDone:
		t.Fatalf("the held command was answered during the navigation: %v", err)
	default:
	}
	s.net.release()
	if err := <-navDone; err != nil {
		t.Fatalf("navigation: %v", err)
	}
	if err := <-evalDone; err != nil {
		t.Fatalf("held command: %v", err)
	}
}

// TestRelayUserAgentNoop: Emulation.setUserAgentOverride answers {} and the origin sees
// the browser's own user agent.
func TestRelayUserAgentNoop(t *testing.T) {
	t.Parallel() // owns its fixture and browser (parallelTests)
	ownFixture(t)
	s := newRelaySetup(t)
	ctx := s.tab(t, "")
	if _, err := chromedp.Call(ctx, emulation.SetUserAgentOverride, emulation.SetUserAgentOverrideParams{UserAgent: "ours/1.0"}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://js.test/relay/ua")); err != nil {
		t.Fatal(err)
	}
	if text := bodyText(t, ctx); strings.Contains(text, "ours/1.0") || !strings.Contains(text, "Chrome") {
		t.Errorf("the origin saw %q, want the browser's own user agent", text)
	}
	if n := s.relay.userAgentNoopCount.Load(); n != 1 {
		t.Errorf("user_agent_noop_count = %d, want 1", n)
	}
}

// TestRelayNavigationErrors: a navigation that fails is a CDP error to Page.navigate,
// not an errorText in a successful answer.
func TestRelayNavigationErrors(t *testing.T) {
	t.Parallel() // owns its fixture and browser (parallelTests)
	ownFixture(t)
	s := newRelaySetup(t)
	ctx := s.tab(t, "")
	nav, err := chromedp.Call(ctx, page.Navigate, page.NavigateParams{URL: "https://refused.test/"})
	var cerr *cdproto.Error
	if !errors.As(err, &cerr) || !strings.Contains(cerr.Message, "Network error") || nav.ErrorText != "" {
		t.Fatalf("err=%v errorText=%q, want a CDP error saying Network error", err, nav.ErrorText)
	}
	if n := s.relay.navErrorCount.Load(); n != 1 {
		t.Errorf("nav_error_count = %d, want 1", n)
	}
	// The connection goes on.
	if err := chromedp.Do(ctx, chromedp.Navigate("http://js.test/relay/ua")); err != nil {
		t.Fatal(err)
	}
}

// TestRelayNeverSendsFailureEvents: a request that fails and a tab that crashes reach the
// client as Obscura sends them: no Network.loadingFailed, no Inspector.targetCrashed.
func TestRelayNeverSendsFailureEvents(t *testing.T) {
	t.Parallel() // owns its fixture and browser (parallelTests)
	ownFixture(t)
	s := newRelaySetup(t)
	var failed, crashed atomic.Int64
	ctx := s.tab(t, "", chromedp.WithListener(func(ev any) {
		switch ev.(type) {
		case *network.EventLoadingFailed:
			failed.Add(1)
		case *inspector.EventTargetCrashed:
			crashed.Add(1)
		}
	}))
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://js.test/relay/failing")); err != nil {
		t.Fatal(err)
	}
	waitUnsent(t, s.relay, "Network.loadingFailed")
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go chromedp.Call(cctx, page.Crash, cdp.Empty{}) // answered by no one: the renderer is gone
	waitUnsent(t, s.relay, "Inspector.targetCrashed")
	if n, c := failed.Load(), crashed.Load(); n != 0 || c != 0 {
		t.Errorf("the client saw %d loadingFailed and %d targetCrashed events, want none", n, c)
	}
}

// waitUnsent waits until the relay kept an event of method from the client.
func waitUnsent(t *testing.T, r *obscuraRelay, method string) {
	t.Helper()
	for {
		select {
		case m := <-r.unsent:
			if m == method {
				return
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("Chromium never sent %s", method)
		}
	}
}

// TestRelaySuspendsOtherPages: on one connection, a navigation's start stops the
// JavaScript of the connection's other page (Chromium says so: Debugger.paused) until
// the navigation is done; then it runs again.
func TestRelaySuspendsOtherPages(t *testing.T) {
	t.Parallel() // owns its fixture and browser (parallelTests)
	ownFixture(t)
	s := newRelaySetup(t)
	a, b := s.tab(t, ""), s.tab(t, "")
	if err := chromedp.Do(b, chromedp.Navigate(`data:text/html,<p>ticks</p><script>window.n = 0; setInterval(() => n++, 5);</script>`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(b, waitAbove(0)); err != nil {
		t.Fatal(err)
	}
	for len(s.relay.paused) > 0 {
		<-s.relay.paused
	}
	before := s.relay.suspendCount.Load()
	navDone := make(chan error, 1)
	go func() { navDone <- chromedp.Do(a, chromedp.Navigate("http://js.test/relay/wait")) }()
	select {
	case <-s.net.waitHit:
	case <-time.After(20 * time.Second):
		t.Fatal("the navigation did not reach the origin")
	}
	select {
	case <-s.relay.paused: // the other page's JavaScript stopped at its next statement
	case <-time.After(20 * time.Second):
		t.Fatal("the other page's JavaScript never stopped during the navigation")
	}
	s.net.release()
	if err := <-navDone; err != nil {
		t.Fatal(err)
	}
	n, err := chromedp.Run(b, chromedp.Evaluate[int](`n`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(b, waitAbove(n)); err != nil {
		t.Fatalf("the page did not run again after the navigation: %v", err)
	}
	// b, and the browser's first tab chromedp attached to: every other page.
	if got := s.relay.suspendCount.Load() - before; got != 2 {
		t.Errorf("%d pages suspended at the navigation, want 2 (every other page of the connection)", got)
	}
}

// relayEvent is one event as a client received it.
type relayEvent struct {
	method, requestID string
	resourceType      network.ResourceType
	timestamp         float64
}

// TestRelayBatchesEvents: a navigation's events come together once it is done, and
// loadEventFired with DOMContentLoaded: it reaches the client while the page's image is
// still held at the origin, so before the real load. A script request (XHR) is reported
// only once finished: its requestWillBeSent, responseReceived and loadingFinished
// come with no other request's event between them.
func TestRelayBatchesEvents(t *testing.T) {
	t.Parallel() // owns its fixture and browser (parallelTests)
	ownFixture(t)
	s := newRelaySetup(t)
	var mu sync.Mutex
	var events []relayEvent
	loaded := make(chan relayEvent, 4)
	finished := make(chan string, 64)
	ctx := s.tab(t, "", chromedp.WithListener(func(ev any) {
		var e relayEvent
		switch ev := ev.(type) {
		case *page.EventDomContentEventFired:
			e = relayEvent{method: "Page.domContentEventFired", timestamp: ev.Timestamp.Float64()}
		case *page.EventLoadEventFired:
			e = relayEvent{method: "Page.loadEventFired", timestamp: ev.Timestamp.Float64()}
			loaded <- e
		case *network.EventRequestWillBeSent:
			e = relayEvent{method: "Network.requestWillBeSent", requestID: string(ev.RequestID), resourceType: ev.Type}
		case *network.EventResponseReceived:
			e = relayEvent{method: "Network.responseReceived", requestID: string(ev.RequestID)}
		case *network.EventLoadingFinished:
			e = relayEvent{method: "Network.loadingFinished", requestID: string(ev.RequestID)}
		default:
			return
		}
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		if e.method == "Network.loadingFinished" {
			select {
			case finished <- e.requestID:
			default:
			}
		}
	}))
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, page.Navigate, page.NavigateParams{URL: `data:text/html,<p>An image that never comes.</p><img src="http://js.test/relay/wait">`}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.net.waitHit:
	case <-time.After(20 * time.Second):
		t.Fatal("the image never reached the origin")
	}
	select {
	case e := <-loaded: // the image is still held: this is not the real load
		mu.Lock()
		var dcl float64
		for _, x := range events {
			if x.method == "Page.domContentEventFired" {
				dcl = x.timestamp
			}
		}
		mu.Unlock()
		if e.timestamp != dcl {
			t.Errorf("loadEventFired at %v, want DOMContentLoaded's %v", e.timestamp, dcl)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no loadEventFired while the image was held")
	}
	s.net.release()
	if n := s.relay.syntheticLoadCount.Load(); n != 1 {
		t.Errorf("synthetic_load_count=%d, want 1", n)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate("http://js.test/relay/script.html")); err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		var id string
		select {
		case id = <-finished:
		case <-time.After(20 * time.Second):
			t.Fatal("the XHR's loadingFinished never came")
		}
		mu.Lock()
		evs := slices.Clone(events)
		mu.Unlock()
		var xhr []int // indices of the XHR's events
		for i, e := range evs {
			if e.requestID == id {
				xhr = append(xhr, i)
			}
		}
		if len(xhr) == 0 || evs[xhr[0]].method != "Network.requestWillBeSent" || evs[xhr[0]].resourceType != network.ResourceTypeXHR {
			continue // another request's
		}
		done = true
		if span := xhr[len(xhr)-1] - xhr[0] + 1; span != len(xhr) {
			t.Errorf("the XHR's events %v are not together: %d other events between them (%+v)", xhr, span-len(xhr), evs)
		}
	}
	if n := s.relay.lateScriptCount.Load(); n < 1 {
		t.Errorf("late_script_count=%d, want the XHR reported once finished", n)
	}
}

// waitAbove waits in the page until its counter n passes k.
func waitAbove(k int) chromedp.Action[bool] {
	return chromedp.Evaluate[bool](fmt.Sprintf(`new Promise(r => { const t = setInterval(() => { if (window.n > %d) { clearInterval(t); r(true); } }, 1); })`, k),
		chromedp.EvalAwaitPromise)
}

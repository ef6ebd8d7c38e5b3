package render

import (
	"context"
	"downloader/render/renderproxy"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserCtxOn connects chromedp to endpoint, for a canary without a pool.
func browserCtxOn(t *testing.T, endpoint string) context.Context {
	t.Helper()
	a := &remoteAllocator{endpoint: endpoint, dialTimeout: 20 * time.Second}
	actx, acancel := chromedp.NewAllocatorContext(context.Background(), a)
	bctx, bcancel := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bcancel()
		acancel()
		a.Wait()
	})
	return bctx
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func canaryCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestCanaryRefusesBypass: on a server that ignores proxyServer and whose own proxy is
// not ours (the relay, in front of a Chromium whose proxy is the open network), the
// canary fails under either profile, and no request reaches any origin.
func TestCanaryRefusesBypass(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	n := newOpenNetwork(t)
	relay := newObscuraRelay(t, startProxiedBrowser(t, n.proxyURL()))
	bctx := browserCtxOn(t, relay.url())
	g := renderproxy.NewGuard(listenLoopback(t), slog.New(slog.DiscardHandler))
	defer g.Close()
	for _, kind := range []RendererKind{RendererChromium, RendererObscura} {
		err := checkGuard(canaryCtx(t), bctx, g, profileFor(kind))
		if !errors.Is(err, errBypassesGuard) {
			t.Errorf("%s profile: canary error %v, want errBypassesGuard", kind, err)
		}
		t.Logf("%s profile: %v", kind, err)
	}
	if got := n.unguardedCount(); got != 0 {
		t.Errorf("%d requests reached an origin around the guard, want 0: %v", got, n.unguarded())
	}
	n.mu.Lock()
	refused := n.refused
	n.mu.Unlock()
	if refused < 2 {
		t.Errorf("the open network saw %d canary requests, want >= 2 (one per profile): the canary did not go around", refused)
	}
}

// TestCanaryAcceptsGuardedServer: once the server's own proxy is our guard proxy
// (`obscura serve --proxy`), the Obscura profile's canary passes, and still nothing
// reaches an origin around the guard.
func TestCanaryAcceptsGuardedServer(t *testing.T) {
	t.Parallel() // owns its fixture and browser (parallelTests)
	ownFixture(t)
	n := newOpenNetwork(t)
	ln := listenLoopback(t)
	g := renderproxy.NewGuard(ln, slog.New(slog.DiscardHandler))
	defer g.Close()
	relay := newObscuraRelay(t, startProxiedBrowser(t, "http://"+g.Addr()))
	bctx := browserCtxOn(t, relay.url())
	if err := checkGuard(canaryCtx(t), bctx, g, profileFor(RendererObscura)); err != nil {
		t.Errorf("canary on a guarded server: %v", err)
	}
	// The Chromium profile asks the context for a proxy the server ignores; the server's
	// own is ours all the same, so it passes too.
	if err := checkGuard(canaryCtx(t), bctx, g, profileFor(RendererChromium)); err != nil {
		t.Errorf("chromium profile on a guarded server: %v", err)
	}
	if got := n.unguardedCount(); got != 0 {
		t.Errorf("%d requests around the guard, want 0", got)
	}
}

// TestCanaryChromium: a Chromium that honours proxyServer passes the canary with the
// Chromium profile. (Not with Obscura's here: that profile sets no proxy on the context,
// and this Chromium, with none of its own, would ask the system resolver for the canary's
// name.)
func TestCanaryChromium(t *testing.T) {
	t.Parallel() // owns its fixture and browser (parallelTests)
	ownFixture(t)
	bctx := browserCtxOn(t, startRemoteBrowser(t))
	g := renderproxy.NewGuard(listenLoopback(t), slog.New(slog.DiscardHandler))
	defer g.Close()
	if err := checkGuard(canaryCtx(t), bctx, g, profileFor(RendererChromium)); err != nil {
		t.Errorf("canary on Chromium: %v", err)
	}
}

package render

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"

	"downloader/internal/testkit"
	"downloader/render/chromium"
)

// The parallel tests' pools run on one local browser (seams.browser), each pool on a
// websocket of its own and in browser contexts of its own, instead of launching a browser
// each: a launch costs about 2 CPU-seconds, and the render lane is CPU-bound
// (docs/reliability.md §10). What a test owns stays its own: its origin, request log,
// guard and violation list (ownFixture), its pool and that pool's configuration, slots,
// tabs, contexts and proxies. Each context is created with DisposeOnDetach, so a pool's
// Close leaves nothing of it in the browser. What the pools share is the process: a test
// that kills, crashes or closes its browser, counts the browser's contexts or targets,
// counts browser processes, or changes the browser's own settings launches its own. Pools
// with extra flags (seams.extraFlags) share the browser launched with the same ones.

// testBrowser is the shared local browser: launched with the flags a pool gives its own
// (localFlags, testUserAgent) and a debugging port on 127.0.0.1.
type testBrowser struct {
	url    string
	deny   net.Listener
	denied atomic.Int64 // connections the browser made outside any render
	cancel context.CancelFunc
	alloc  *chromium.Allocator
	wg     sync.WaitGroup
}

// sharedBrowsers are the shared browsers by their extra flags; TestMain closes them
// (closeFixture).
var sharedBrowsers struct {
	mu     sync.Mutex
	closed bool
	m      map[string]*sharedLaunch
}

// sharedLaunch is one shared browser's launch, made once.
type sharedLaunch struct {
	once sync.Once
	b    *testBrowser
	err  error
}

func (b *testBrowser) websocketURL() string { return b.url }

// sharedBrowser returns the shared browser with extra flags set, launching it at the
// first call.
func sharedBrowser(t testing.TB, extra ...string) *testBrowser {
	t.Helper()
	key := strings.Join(extra, " ")
	sharedBrowsers.mu.Lock()
	if sharedBrowsers.closed {
		sharedBrowsers.mu.Unlock()
		t.Fatal("the shared browsers are closed")
	}
	if sharedBrowsers.m == nil {
		sharedBrowsers.m = make(map[string]*sharedLaunch)
	}
	l := sharedBrowsers.m[key]
	if l == nil {
		l = &sharedLaunch{}
		sharedBrowsers.m[key] = l
	}
	sharedBrowsers.mu.Unlock()
	l.once.Do(func() { l.b, l.err = launchTestBrowser(extra) })
	if l.err != nil {
		t.Fatalf("shared browser %q: %v", key, l.err)
	}
	return l.b
}

// closeSharedBrowsers closes every shared browser.
func closeSharedBrowsers() {
	sharedBrowsers.mu.Lock()
	sharedBrowsers.closed = true
	m := sharedBrowsers.m
	sharedBrowsers.mu.Unlock()
	for _, l := range m {
		l.once.Do(func() {})
		if l.b != nil {
			l.b.close()
		}
	}
}

// onSharedBrowser returns sm with the shared browser of sm's extra flags as the pool's
// (seams.browser).
func onSharedBrowser(t testing.TB, sm seams) seams {
	t.Helper()
	sm.browser = sharedBrowser(t, sm.extraFlags...)
	sm.extraFlags = nil // the browser's, not the pool's (seams.browser)
	return sm
}

// checkNoStray fails t if the shared browser has made a connection outside any render (its
// default context's proxy refuses everything): what fixture.pool checks of a pool's own
// browser. The count is the browser's, not the test's: a stray connection fails whichever
// test looks next.
func (b *testBrowser) checkNoStray(t testing.TB) {
	t.Helper()
	if n := b.denied.Load(); n != 0 {
		t.Errorf("the shared browser made %d connections outside any render", n)
	}
}

func launchTestBrowser(extra []string) (*testBrowser, error) {
	deny, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("deny listener: %w", err)
	}
	b := &testBrowser{deny: deny}
	b.wg.Go(func() {
		for {
			c, err := deny.Accept()
			if err != nil {
				return
			}
			c.Close()
			b.denied.Add(1)
		}
	})
	opts := append(localFlags(DefaultBinaryPath, testUserAgent, deny.Addr().String(), extra),
		chromedp.Flag("remote-debugging-address", "127.0.0.1"),
		chromedp.Flag("remote-debugging-port", "0"),
		remote.WebSocket) // the owner's connection too is a websocket, as the pools' are
	a, err := chromium.NewAllocator(context.Background(), DefaultBinaryPath, time.Now(), opts...)
	if err != nil {
		b.closeDeny()
		return nil, err
	}
	b.alloc = a
	ctx, cancel := chromedp.NewContext(a.Ctx)
	b.cancel = cancel
	// The first call launches the browser and binds it to ctx (no deadline: the test
	// binary's -timeout bounds it).
	if _, err := chromedp.Targets(ctx); err != nil {
		b.close()
		return nil, fmt.Errorf("launch: %w", err)
	}
	// Chromium writes its port and browser path there once it listens; it has by now (the
	// connection above is that listener's).
	raw, err := os.ReadFile(filepath.Join(a.ProfilePath(), "DevToolsActivePort"))
	if err != nil {
		b.close()
		return nil, err
	}
	port, path, ok := strings.Cut(strings.TrimSpace(string(raw)), "\n")
	if !ok || !strings.HasPrefix(path, "/devtools/browser/") {
		b.close()
		return nil, fmt.Errorf("DevToolsActivePort: %q", raw)
	}
	b.url = "ws://" + net.JoinHostPort("127.0.0.1", strings.TrimSpace(port)) + strings.TrimSpace(path)
	return b, nil
}

// close kills the browser and waits for it, removes its profile and closes the deny
// listener.
func (b *testBrowser) close() {
	b.cancel()
	b.alloc.Close()
	b.closeDeny()
}

func (b *testBrowser) closeDeny() {
	b.deny.Close()
	b.wg.Wait()
}

// TestSharedBrowserPoolLeavesNothing: a pool on the shared browser leaves none of its
// browser contexts or tabs there once closed, which is what lets the parallel tests share
// the browser. Sequential: no other pool is on the browser meanwhile (the sequential
// tests' pool has a browser of its own).
func TestSharedBrowserPoolLeavesNothing(t *testing.T) {
	f := getFixture(t)
	sb := sharedBrowser(t)
	before := sb.contents(t)
	p, err := newHopsPool(f.sharedConfig(testLogger(t)), onSharedBrowser(t, seams{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if out := render(t, p, "js.test/", safetyTimeout(t)); out.FailReason != "" {
		t.Fatalf("fail_reason=%s", failReason(out))
	}
	if during := sb.contents(t); len(during.contexts) <= len(before.contexts) {
		t.Fatalf("contexts %v while the pool is up, before it %v: want the pool's there", during.contexts, before.contexts)
	}
	p.Close()
	var after browserContents
	// The browser disposes of a detached connection's contexts after the detach.
	testkit.WaitFor(t, safetyTimeout(t), "the pool's contexts gone", func() bool {
		after = sb.contents(t)
		return slices.Equal(after.contexts, before.contexts) && after.pages == before.pages
	})
	sb.checkNoStray(t)
}

// browserContents is what a browser holds: its contexts (sorted) and its pages.
type browserContents struct {
	contexts []cdp.BrowserContextID
	pages    int
}

// contents lists the browser's contexts and counts its pages, over a connection of its own.
func (b *testBrowser) contents(t *testing.T) browserContents {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), safetyTimeout(t))
	defer cancel()
	a := &remoteAllocator{endpoint: b.url, dialTimeout: DefaultLaunchTimeout}
	actx, acancel := chromedp.NewAllocatorContext(context.Background(), a)
	bctx, bcancel := chromedp.NewContext(actx)
	defer func() {
		bcancel()
		acancel()
		a.Wait()
	}()
	if _, err := chromedp.Targets(bctx); err != nil {
		t.Fatal(err)
	}
	br := chromedp.FromContext(bctx).Browser
	res, err := cdp.Call(ctx, br, target.GetBrowserContexts, cdp.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	targets, err := cdp.Call(ctx, br, target.GetTargets, target.GetTargetsParams{})
	if err != nil {
		t.Fatal(err)
	}
	var c browserContents
	c.contexts = slices.Sorted(slices.Values(res.BrowserContextIDs))
	for _, ti := range targets.TargetInfos {
		if ti.Type == "page" {
			c.pages++
		}
	}
	return c
}

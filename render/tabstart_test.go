package render

import (
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"downloader/clock"
	"downloader/internal/testkit"
	"downloader/limiter"
)

// stallRelay is a CDP relay between the pool and a real browser that, while stalling is
// on, never passes on a tab's Runtime.enable (a command with a session): the tab's start
// waits for an answer that never comes, as a browser under heavy load was seen to leave
// one. Everything else goes through unchanged.
type stallRelay struct {
	upstream string
	ln       net.Listener
	srv      *http.Server
	wg       sync.WaitGroup

	isStalling   atomic.Bool
	stalledCount atomic.Int64

	mu    sync.Mutex
	conns []*websocket.Conn
}

func newStallRelay(t *testing.T, upstream string) *stallRelay {
	t.Helper()
	r := &stallRelay{upstream: upstream, ln: listenLoopback(t)}
	r.srv = &http.Server{Handler: websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil },
		Handler:   r.serve,
	}}
	r.wg.Go(func() { r.srv.Serve(r.ln) })
	t.Cleanup(func() {
		r.srv.Close() // hijacked websockets are not closed by it
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *stallRelay) url() string { return "ws://" + r.ln.Addr().String() + "/devtools/browser" }

func (r *stallRelay) serve(client *websocket.Conn) {
	upstream, ok := dialUpstream(client, r.upstream)
	if !ok {
		return
	}
	r.mu.Lock()
	r.conns = append(r.conns, client, upstream)
	r.mu.Unlock()
	var pumps sync.WaitGroup
	pumps.Go(func() { r.pump(upstream, client, nil) })
	pumps.Go(func() { r.pump(client, upstream, r.isStalled) })
	pumps.Wait()
}

// pump copies text messages from src to dst, minus those drop says to keep back; it
// closes both ends when either ends.
func (r *stallRelay) pump(src, dst *websocket.Conn, drop func(string) bool) {
	defer src.Close()
	defer dst.Close()
	for {
		var text string
		if err := websocket.Message.Receive(src, &text); err != nil {
			return
		}
		if drop != nil && drop(text) {
			continue
		}
		if err := websocket.Message.Send(dst, text); err != nil {
			return
		}
	}
}

func (r *stallRelay) isStalled(text string) bool {
	if !r.isStalling.Load() {
		return false
	}
	var m cdpMessage
	if json.Unmarshal([]byte(text), &m) != nil || m.SessionID == "" || m.Method != "Runtime.enable" {
		return false
	}
	r.stalledCount.Add(1)
	return true
}

// TestWarmTabStartBounded: a warm-up whose tab the browser never finishes starting ends
// after LaunchTimeout, so that the render waiting for it makes its own tab and renders,
// instead of waiting out its own timeout (and the next render after it, and so on: a
// pool that renders nothing while its browser answers everything else). A context per
// render, one warm tab: each render takes the warm tab and starts its replacement.
func TestWarmTabStartBounded(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	f := getFixture(t)
	relay := newStallRelay(t, startDebugBrowser(t, "stall-browser-", "--remote-allow-origins=*"))
	p, err := newHopsPool(Config{
		Endpoint:      relay.url(),
		Kind:          RendererChromium,
		Isolation:     IsolationContext,
		WarmTabs:      1,
		Concurrency:   1,
		QueueLength:   1,
		UserAgent:     testUserAgent,
		Guard:         f.guard,
		LaunchTimeout: 20 * time.Second,
		Logger:        testLogger(t),
	}, seams{}, limiterHops{l: limiter.New(clock.Real{})})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	warmState := func() (warming, spares int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.warming, len(p.spares)
	}
	testkit.WaitFor(t, safetyTimeout(t), "the pool's warm tab", func() bool {
		warming, spares := warmState()
		return warming == 0 && spares == 1
	})

	// The first render takes the warm tab; its replacement's start is held back.
	relay.isStalling.Store(true)
	if out := render(t, p, "js.test/", safetyTimeout(t)); out.FailReason != "" {
		t.Fatalf("first render: fail_reason=%s", failReason(out))
	}
	testkit.WaitFor(t, safetyTimeout(t), "the replacement warm-up to be stalled", func() bool {
		warming, _ := warmState()
		return warming > 0 && int64(warming) == relay.stalledCount.Load()
	})
	relay.isStalling.Store(false) // from now on tabs start

	// Three times LaunchTimeout: without the bound the render waits out all of it
	// for the stalled warm-up and fails render_timeout.
	out := render(t, p, "js.test/", 60*time.Second)
	if out.FailReason != "" {
		t.Fatalf("fail_reason=%s (%d tab starts held back), want a render once the stalled warm-up gave up",
			failReason(out), relay.stalledCount.Load())
	}
	f.noViolations(t)
}

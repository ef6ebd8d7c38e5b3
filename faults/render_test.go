package faults

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
	"downloader/internal/testkit"
	"downloader/netguard"
	"downloader/render"
)

// Render pages (host render-NAME.test).
const (
	// thousandsPage opens 2000 XHRs as soon as it runs.
	thousandsPage = `<!doctype html><html><head><meta charset="utf-8"><title>Thousands</title></head><body>
<p>This page opens thousands of sub-requests at once.</p>
<script>
for (let i = 0; i < 2000; i++) { fetch("/sub?i=" + i).catch(function () {}); }
document.body.insertAdjacentHTML("beforeend", "<p>The script ran to its end.</p>");
</script></body></html>`
	// busyPage polls its server for ever: its network is never quiet.
	busyPage = `<!doctype html><html><head><meta charset="utf-8"><title>Never idle</title></head><body>
<p>This page polls its server for ever, so the network is never quiet.</p>
<script>setInterval(function () { fetch("/tick?" + Date.now()).catch(function () {}); }, 30);</script>
</body></html>`
)

// subCount counts the sub-requests the render pages caused at the origin.
var subCount atomic.Int64

func (o *origin) servePage(w http.ResponseWriter, r *http.Request, name string) {
	if r.URL.Path != "/" {
		subCount.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch name {
	case "thousands":
		io.WriteString(w, thousandsPage)
	case "busy":
		io.WriteString(w, busyPage)
	default:
		io.WriteString(w, okPage)
	}
}

// Test render limits.
const (
	renderConcurrency = 2
	renderQueueLength = 2
	renderNetworkIdle = 2 * time.Second
	renderTimeout     = 30 * time.Second
	// renderBystanderTime bounds a plain request beside renders: the browser competes for
	// the two cores.
	renderBystanderTime = 5 * time.Second
	renderLaunchTimeout = 30 * time.Second
)

// newPool is a browser pool on r's guard, closed when t ends, when the test also checks
// that no browser process of ours is left.
func newPool(t *testing.T, guard *netguard.Guard, concurrency, queueLength int) *render.Pool {
	t.Helper()
	p, err := render.New(render.Config{
		// Its warnings (a tab not started, a wipe failed, a hop not admitted in time) show
		// when the test fails: where a render's time went.
		Logger:         testkit.Logger(t, slog.LevelInfo),
		Concurrency:    concurrency,
		QueueLength:    queueLength,
		WarmTabs:       1,
		Guard:          guard,
		NetworkIdleMax: renderNetworkIdle,
		DefaultTimeout: renderTimeout,
		LaunchTimeout:  renderLaunchTimeout,
	})
	if err != nil {
		t.Fatalf("render pool: %v", err)
	}
	t.Cleanup(func() {
		p.Close()
		// SIGKILL is asynchronous: processes killed by Close get a bounded moment to go.
		if !testkit.Eventually(5*time.Second, func() bool { return len(ownBrowsers()) == 0 }) {
			t.Errorf("browser processes left after the pool closed: %v", ownBrowsers())
		}
	})
	return p
}

// render runs entry B with rendering.
func (r *rig) render(rawURL string, timeout time.Duration) (*downloader.Answer, error) {
	u, req := request(rawURL)
	req.ShouldRender = true
	req.Timeout = timeout
	return r.engine.Render(context.Background(), req, u)
}

// TestHostileRenders is the hostile-origin check for renders: a page that opens thousands of
// sub-requests and a page that never goes network-idle are read as they are within their
// limits, classified, and a bystander's requests go on unharmed.
func TestHostileRenders(t *testing.T) {
	noLeaks(t)
	r := newRig(t, rigConfig{renderConcurrency: renderConcurrency, renderQueueLength: renderQueueLength})
	p := r.pool
	// Warm up: the browser is launched and a tab is ready, so the limits below are the
	// pages' alone.
	if res, err := r.render("http://render-warmup.test/", renderTimeout); err != nil || reasonOf(res.Summary) != "" {
		t.Fatalf("warm-up render: %v %v", err, res)
	}
	if len(ownBrowsers()) == 0 {
		t.Fatal("no browser process of ours found while the pool is up: the leak check would prove nothing")
	}
	renderersBefore := idleRenderers(t, p)
	// A render holds no slot a plain request needs: the bystander is not held up by more
	// than the browser's load on two cores.
	by := startBystander(r, renderBystanderTime)
	// Each page is read as it is: NetworkIdleMax after its load event, long before the
	// render's timeout (which only a page whose DOM never loads would meet).
	tests := []struct {
		name  string
		url   string
		check func(t *testing.T, hs *downloader.HealthSignal)
	}{
		{"thousands of sub-requests", "http://render-thousands.test/",
			func(t *testing.T, hs *downloader.HealthSignal) {
				if hs.SubrequestCount == nil || *hs.SubrequestCount < 100 {
					t.Errorf("subrequest_count=%v, want the sub-requests counted", hs.SubrequestCount)
				}
			}},
		{"never network-idle", "http://render-busy.test/",
			func(t *testing.T, hs *downloader.HealthSignal) {
				if hs.XHRCount == nil || *hs.XHRCount < 5 {
					t.Errorf("xhr_count=%v, want the polls counted", hs.XHRCount)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			res, err := r.render(tt.url, renderTimeout)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("over limit: %v", err)
			}
			if reasonOf(res.Summary) != "" || !res.Summary.HasReachedOrigin {
				t.Fatalf("%s, want the page read as it is", describe(res.Summary))
			}
			if took >= renderTimeout {
				t.Errorf("took %v, want less than the timeout %v", took, renderTimeout)
			}
			if !strings.Contains(res.Outcome.Text, "This page") {
				t.Errorf("text %q, want the page's text", res.Outcome.Text)
			}
			tt.check(t, res.Summary.HealthSignal)
			t.Logf("%s in %v, %d sub-requests at the origin so far", describe(res.Summary), took, subCount.Load())
		})
	}
	by.check(t)
	if s := p.Stats(); !s.IsBrowserUp || s.BusyCount != 0 {
		t.Errorf("pool after the hostile pages: %+v, want up and idle", s)
	}
	checkNoTabLeft(t, p, renderersBefore)
}

// idleRenderers waits until p is idle with its warm tab ready and returns how many
// renderer processes our browsers have then.
func idleRenderers(t *testing.T, p *render.Pool) int {
	t.Helper()
	if !testkit.Eventually(30*time.Second, func() bool { s := p.Stats(); return s.BusyCount == 0 && s.WarmTabCount >= 1 }) {
		t.Fatalf("pool %+v: not idle with a warm tab", p.Stats())
	}
	n := ownRenderers()
	if n == 0 {
		var cmds []string
		for _, pid := range ownBrowsers() {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			cmds = append(cmds, string(b[:min(len(b), 200)]))
		}
		t.Fatalf("no renderer process found while a tab is open: the tab leak check would prove nothing; %q", cmds)
	}
	return n
}

// checkNoTabLeft fails t unless, once p is idle again, our browsers have no more renderer
// processes than before (each render's tab has its own, closed with it).
func checkNoTabLeft(t *testing.T, p *render.Pool, before int) {
	t.Helper()
	var after int
	if !testkit.Eventually(10*time.Second, func() bool {
		s := p.Stats()
		after = ownRenderers()
		return s.BusyCount == 0 && s.WarmTabCount >= 1 && after <= before
	}) {
		t.Errorf("renderer processes: %d before the renders, %d after (pool %+v): a tab was left open", before, after, p.Stats())
	}
	t.Logf("renderer processes: %d before, %d after", before, after)
}

// TestQueuedRenderHoldsNoGlobalSlot: a render waiting for a browser slot must not keep a
// plain request from the global cap (max_concurrent_count). With the cap at 2, one render
// running and one waiting for the pool's only slot, a plain probe of another domain goes
// through at once: the engine takes the pool's slot (Renderer.AcquireSlot) before a
// global one.
func TestQueuedRenderHoldsNoGlobalSlot(t *testing.T) {
	noLeaks(t)
	r := newRig(t, rigConfig{gateCapacity: 2, queueLength: 4, renderConcurrency: 1, renderQueueLength: 4, timeout: renderTimeout})
	t.Cleanup(r.origin.releaseSlow)
	if res, err := r.render("http://render-warmup.test/", renderTimeout); err != nil || reasonOf(res.Summary) != "" {
		t.Fatalf("warm-up render: %v %v", err, res)
	}
	held := make(chan *downloader.Answer, 2)
	for i := range 2 {
		go func() {
			res, _ := r.render(fmt.Sprintf("http://slowrender%d.test/", i), renderTimeout)
			held <- res
		}()
	}
	if !testkit.Eventually(30*time.Second, func() bool { s := r.pool.Stats(); return s.BusyCount == 1 && s.QueuedCount == 1 }) {
		t.Fatalf("pool %+v: want 1 rendering and 1 waiting", r.pool.Stats())
	}
	globalHeld := r.gate.InFlight()
	done := make(chan downloader.Summary, 1)
	go func() { done <- r.probe("http://bystander.test/") }()
	// Either the probe answers (the gap is closed) or it is seen waiting at the gate.
	var waited bool
	if !testkit.Eventually(30*time.Second, func() bool {
		select {
		case s := <-done:
			done <- s
			return true
		default:
		}
		waited = r.gate.Waiting() > 0
		return waited
	}) {
		t.Fatal("the probe neither answered nor waited at the gate")
	}
	if waited {
		t.Errorf("a plain probe waits at the global gate (%d of %d slots held, %d of them by renders; pool %+v): a render queued for the browser holds a global slot",
			r.gate.InFlight(), r.gate.Capacity(), globalHeld, r.pool.Stats())
	}
	r.origin.releaseSlow()
	if s := <-done; reasonOf(s) != "" {
		t.Errorf("the probe: %s", describe(s))
	}
	for range 2 {
		if res := <-held; res == nil || reasonOf(res.Summary) != "" {
			t.Errorf("a held render: %v", res)
		}
	}
}

package faults

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
	"downloader/engine"
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
		Logger:         slog.New(slog.DiscardHandler),
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
		if !eventually(5*time.Second, func() bool { return len(ownBrowsers()) == 0 }) {
			t.Errorf("browser processes left after the pool closed: %v", ownBrowsers())
		}
	})
	return p
}

// render runs entry B with rendering.
func (r *rig) render(rawURL string, timeout time.Duration) (*engine.Result, error) {
	u, req := request(rawURL)
	req.ShouldRender = true
	req.Timeout = timeout
	return r.engine.Render(context.Background(), req, u)
}

// TestHostileRenders is issue 7 item 4 for renders: a page that opens thousands of
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
}

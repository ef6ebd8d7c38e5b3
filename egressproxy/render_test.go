package egressproxy_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"downloader"
	"downloader/egressproxy"
	"downloader/netguard"
	"downloader/origintest"
	"downloader/render"
)

// renderTimeout is generous: a render on the shared 2-core test machine under load (load
// average 40-55) took over 20 s; the test is about where the connections go, not speed.
const renderTimeout = 90 * time.Second

// needChromium skips outside CI and fails in CI when Debian's headless Chromium is missing.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(render.DefaultBinaryPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: %v (scripts/setup.sh installs it)", render.DefaultBinaryPath, err)
		}
		t.Skipf("%s not found (scripts/setup.sh installs it)", render.DefaultBinaryPath)
	}
}

// renderPage is a page whose text is written by its script from an XHR's answer: the
// render's sub-requests went through too.
func renderPage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/api" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"word":"tunnelled"}`)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, `<!doctype html><html><body><p id="t">waiting</p><script>
fetch("/api").then(r => r.json()).then(j => { document.getElementById("t").textContent = "answer " + j.word; });
</script></body></html>`)
}

func newPool(t *testing.T, guard *netguard.Guard) *render.Pool {
	t.Helper()
	// Pausing documents as the service does (its page makes no hop: none to admit).
	p, err := render.New(render.Config{Concurrency: 1, WarmTabs: -1, Guard: guard, Logger: slog.New(slog.DiscardHandler),
		ShouldAdmitHops: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestRenderThroughProxy: a render's main document and its XHR go through each real
// proxy (Chromium talks to our per-render proxy, which dials origins through the guard
// and so through the egress proxy); with the proxy down the render fails as our own
// egress (egress_unavailable, has_reached_origin=false), never as the site's.
func TestRenderThroughProxy(t *testing.T) {
	needChromium(t)
	origin := origintest.New(http.HandlerFunc(renderPage))
	defer origin.Close()
	for _, pk := range proxyKinds {
		t.Run(pk.name, func(t *testing.T) {
			proxyURL, creds := pk.start(t)
			guard, pd := guardThrough(t, proxyURL, creds, []string{origin.ConnectTo()}, nil)
			p := newPool(t, guard)
			out := p.Render(t.Context(), mustURL("http://page.test/"), nil, renderTimeout)
			if out.FailReason != "" || out.HTTPStatus != 200 {
				t.Fatalf("fail_reason=%q http_status=%d cause=%v", out.FailReason, out.HTTPStatus, out.Cause)
			}
			if !strings.Contains(out.Text, "answer tunnelled") {
				t.Errorf("text %q: the XHR's answer is missing", out.Text)
			}
			if pd.count.Load() == 0 {
				t.Error("no connection went to the proxy")
			}
		})
	}
	t.Run("proxy_down", func(t *testing.T) {
		guard, _ := guardThrough(t, "http://"+closedPort(t), egressproxy.Credentials{}, []string{origin.ConnectTo()}, nil)
		p := newPool(t, guard)
		out := p.Render(t.Context(), mustURL("http://down.test/"), nil, renderTimeout)
		if out.Cause != downloader.CauseEgressProxyFailed || out.FailReason != downloader.FailEgressUnavailable || out.FailReason.HasReachedOrigin() {
			t.Errorf("cause %v fail_reason %q: want egress_proxy_failed, egress_unavailable, not reached", out.Cause, out.FailReason)
		}
		if n := origin.CountByHost()["down.test"]; n != 0 {
			t.Errorf("the origin saw %d requests", n)
		}
	})
}

package render

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"downloader/clock"
	"downloader/netguard"
)

// framesPage puts its text on the page only from callbacks that need the page to be
// composited: a chain of requestAnimationFrame callbacks, an IntersectionObserver, the end
// of a CSS animation and a ResizeObserver. Browser flags that save CPU by never producing
// a frame (--disable-threaded-compositing in headless mode does: measured in
// docs/benchmarks-render.md) leave it empty.
const framesPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>frames</title>
<style>@keyframes fade { from { opacity: 0 } to { opacity: 1 } } #anim { animation: fade 50ms }</style>
</head><body>
<div id="anim">.</div><div id="seen">.</div>
<script>
  // The page keeps a request open (/hold) until all four have run (/done), so the render,
  // which reads the page once the network is quiet, cannot read it before, however slowly
  // a loaded machine produces frames.
  var said = {}, held = fetch("/hold");
  function say(s) {
    if (said[s]) return;
    said[s] = true;
    var p = document.createElement("p"); p.textContent = s; document.body.appendChild(p);
    if (Object.keys(said).length == 4) fetch("/done");
  }
  var n = 0;
  function frame() { if (++n < 10) { requestAnimationFrame(frame); } else { say("animation frames ran"); } }
  requestAnimationFrame(frame);
  new IntersectionObserver(function (e) { if (e[0].isIntersecting) say("intersection observed"); }).observe(document.getElementById("seen"));
  document.getElementById("anim").addEventListener("animationend", function () { say("css animation ended"); });
  new ResizeObserver(function () { say("resize observed"); }).observe(document.body);
</script>
</body></html>`

// TestRenderPageGetsFrames checks that a rendered page is composited like a visible one:
// requestAnimationFrame, IntersectionObserver (lazy loading), CSS animations and
// ResizeObserver all run before the page is read.
func TestRenderPageGetsFrames(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	f := getFixture(t)
	allRan := make(chan struct{})
	var once sync.Once
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold":
			select {
			case <-allRan:
			case <-r.Context().Done():
			}
		case "/done":
			once.Do(func() { close(allRan) })
		default:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, framesPage)
		}
	}))
	defer origin.Close()
	_, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	guard := netguard.New(netguard.Config{
		ConnectTo: []netguard.Rule{mustRule("frames-run.test:80:127.0.0.1:" + port)},
		Resolver:  fakeResolver{},
		Dialer:    loopbackOnly{f},
	})
	p, err := newPool(Config{
		Clock:       clock.Real{},
		Logger:      slog.New(slog.DiscardHandler),
		Concurrency: 1,
		WarmTabs:    -1,
		UserAgent:   testUserAgent,
		Guard:       guard,
	}, onSharedBrowser(t, seams{}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	out := p.Render(context.Background(), f.url("frames-run.test/"), nil, 30*time.Second)
	checkCause(t, out)
	if out.FailReason != "" {
		t.Fatalf("fail_reason=%s", failReason(out))
	}
	for _, want := range []string{"animation frames ran", "intersection observed", "css animation ended", "resize observed"} {
		if !strings.Contains(out.Text, want) {
			t.Errorf("rendered text %q lacks %q: the page got no frame", out.Text, want)
		}
	}
	f.noViolations(t)
}

package render

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRenderSiteAffinity: with IsolationWipe and two slots, a site's next page that comes
// while the context holding the site's cache serves another render waits for that context
// and gets its bundle from the cache; with the wait bounded to nothing it takes the other,
// cold, tab and fetches the bundle again. Either way the render itself succeeds.
func TestRenderSiteAffinity(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	f := getFixture(t)
	for _, tt := range []struct {
		name        string
		wait        time.Duration
		wantBundles int // bundle requests over the site's two pages
	}{
		{"waits for the site's context", time.Minute, 1},
		{"bounded wait takes another tab", time.Nanosecond, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{}) // answers /hold: the slow page's network goes quiet
			held := make(chan struct{}, 1) // /hold was asked for
			handlers := cachedHandlers()
			handlers["/slow"] = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				fmt.Fprint(w, `<!doctype html><html><body><p>Slow page.</p><script>fetch("/hold")</script></body></html>`)
			}
			handlers["/hold"] = func(w http.ResponseWriter, r *http.Request) {
				select {
				case held <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-r.Context().Done():
				}
				w.Write([]byte("held"))
			}
			o := newSiteOrigin(t, handlers)
			waited := make(chan string, 4)
			p := o.poolSeams(t, Config{Isolation: IsolationWipe, Concurrency: 2,
				Trace: &Trace{AffinityWaitStarted: func(site string) { waited <- site }}}, true, seams{affinityWait: tt.wait})
			site := siteName(7)
			const timeout = 10 * time.Minute // its tenth bounds the wait too: the case's wait rules
			mark := o.mark()
			if out := p.Render(context.Background(), f.url(site+"/p1"), nil, timeout); out.FailReason != "" || !strings.Contains(out.Text, "Bundle ran.") {
				t.Fatalf("first page: fail_reason=%s text %q", failReason(out), out.Text)
			}
			// The site's context, wiped and free, takes the slow page (for the cache) and
			// stays busy until release.
			waitSiteSpare(p.Pool, site)
			var wg sync.WaitGroup
			defer wg.Wait()
			var releaseOnce sync.Once
			let := func() { releaseOnce.Do(func() { close(release) }) }
			defer let()
			wg.Go(func() {
				if out := p.Render(context.Background(), f.url(site+"/slow"), nil, timeout); out.FailReason != "" {
					t.Errorf("slow page: fail_reason=%s", failReason(out))
				}
			})
			<-held
			for len(waited) > 0 {
				<-waited // the slow page's own wait, if it came while the context was wiped
			}
			second := make(chan string, 1)
			wg.Go(func() {
				out := p.Render(context.Background(), f.url(site+"/p2"), nil, timeout)
				if out.FailReason != "" || !strings.Contains(out.Text, "Bundle ran.") {
					t.Errorf("second page: fail_reason=%s text %q", failReason(out), out.Text)
				}
				second <- out.Text
			})
			hasWaited := false
			select {
			case s := <-waited:
				hasWaited = s == site
				let() // the slow render ends and its context is wiped, then serves p2
				<-second
			case <-second: // p2 took the other tab without waiting
				let()
			}
			wg.Wait()
			if !hasWaited {
				t.Errorf("the second page never waited for its site's context")
			}
			if got := o.requests(mark, func(host, path string) bool { return host == site && path == "/bundle.js" }); len(got) != tt.wantBundles {
				t.Errorf("the bundle reached the origin %d times over the site's two pages, want %d", len(got), tt.wantBundles)
			}
		})
	}
}

// waitSiteSpare waits until a free long-lived tab's context has rendered site (its wipe
// over).
func waitSiteSpare(p *Pool, site string) {
	for {
		p.mu.Lock()
		found := slices.ContainsFunc(p.spares, func(t *tab) bool { return t.sc != nil && t.sc.sites[site] })
		ready := p.spareReady
		p.mu.Unlock()
		if found {
			return
		}
		<-ready
	}
}

package render

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
)

// stateHandlers serve state.html, which reports the cookies (set by JavaScript and by
// Set-Cookie), localStorage, sessionStorage and IndexedDB it finds, then writes all four;
// /ping is a request made after the writes, which carries this render's cookies. /hold is
// answered once the page says /done (or after 15 s): it keeps the page's network busy until
// its verdict is written, so a slow IndexedDB under load cannot let the render read
// "Checking.".
func stateHandlers() map[string]http.HandlerFunc {
	var n atomic.Int64
	var mu sync.Mutex
	done := map[string]chan struct{}{}
	doneOf := func(v string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		c, ok := done[v]
		if !ok {
			c = make(chan struct{})
			done[v] = c
		}
		return c
	}
	return map[string]http.HandlerFunc{
		"/hold": func(w http.ResponseWriter, r *http.Request) {
			t := time.NewTimer(15 * time.Second)
			defer t.Stop()
			select {
			case <-doneOf(r.URL.Query().Get("v")):
			case <-t.C:
			case <-r.Context().Done():
			}
			w.Write([]byte("held"))
		},
		"/done": func(w http.ResponseWriter, r *http.Request) {
			c := doneOf(r.URL.Query().Get("v"))
			mu.Lock()
			select {
			case <-c:
			default:
				close(c)
			}
			mu.Unlock()
			w.Write([]byte("ok"))
		},
		"/": func(w http.ResponseWriter, r *http.Request) {
			// Every answer's cookies have values of their own, so that a page tells its
			// own from an earlier render's.
			v := strconv.FormatInt(n.Add(1), 10)
			http.SetCookie(w, &http.Cookie{Name: "srv", Value: v, Path: "/", MaxAge: 3600})
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write(bytes.ReplaceAll(testdata("state.html"), []byte("{{srv}}"), []byte(v)))
		},
		"/ping": func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("pong")) },
	}
}

// TestRenderIsolationModes: in both isolation modes, a page rendered again and again in
// one slot, on the same site and interleaved with other sites, never finds an earlier
// render's cookies (JavaScript or Set-Cookie), localStorage, sessionStorage or IndexedDB,
// and no document request carries a cookie; with IsolationWipe also with a spare tab
// (SpareTabCount), where renders take turns between two long-lived tabs.
func TestRenderIsolationModes(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	for _, tt := range []struct {
		name   string
		mode   Isolation
		spares int
	}{{"wipe", IsolationWipe, 0}, {"wipe-spare", IsolationWipe, 1}, {"context", IsolationContext, 0}} {
		mode := tt.mode
		t.Run(tt.name, func(t *testing.T) {
			o := newSiteOrigin(t, stateHandlers())
			p := o.pool(t, Config{Isolation: mode, Concurrency: 1, SpareTabCount: tt.spares})
			f := getFixture(t)
			mark := o.mark()
			for i, s := range []int{1, 1, 2, 1, 3, 2, 1, 1} {
				u := f.url(siteName(s) + "/")
				out := p.Render(context.Background(), u, nil, safetyTimeout(t))
				if out.FailReason != "" || out.Text != "Checking. CLEAN" && out.Text != "CLEAN" {
					t.Errorf("render %d of %s: fail_reason=%s text %q, want CLEAN", i, u, failReason(out), out.Text)
				}
			}
			docs := o.requests(mark, func(_, path string) bool { return path == "/" })
			if len(docs) != 8 {
				t.Errorf("%d document requests reached the origin, want 8", len(docs))
			}
			for _, r := range docs {
				if c := r.Header.Get("Cookie"); c != "" {
					t.Errorf("a document request to %s carried %q from an earlier render", r.Host, c)
				}
			}
			if st := p.Stats(); mode == IsolationWipe && (st.RecycledContextCount != 0 || st.ContextCount != 1+tt.spares) {
				// Not vacuous either: one tab and context per slot (and spare) served all
				// eight, wiped in place.
				t.Errorf("context_count=%d recycled_context_count=%d, want %d long-lived contexts never replaced", st.ContextCount, st.RecycledContextCount, 1+tt.spares)
			}
			// The check is not vacuous: each ping carried what its own render set, and
			// nothing else.
			for i, r := range o.requests(mark, func(_, path string) bool { return path == "/ping" }) {
				v := strconv.Itoa(i + 1)
				if c := r.Header.Get("Cookie"); c != "srv="+v+"; js="+v && c != "js="+v+"; srv="+v {
					t.Errorf("ping %d carried %q, want this render's own srv=%s and js=%s only", i, c, v, v)
				}
			}
		})
	}
}

// cachedHandlers serve two pages of a site that share a bundle; the pages and the bundle
// are cacheable for an hour.
func cachedHandlers() map[string]http.HandlerFunc {
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=3600")
		fmt.Fprintf(w, `<!doctype html><html><head><script src="/bundle.js"></script></head><body><p id="out">Page %s.</p></body></html>`, r.URL.Path)
	}
	return map[string]http.HandlerFunc{
		"/p1": page,
		"/p2": page,
		"/bundle.js": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/javascript")
			w.Header().Set("Cache-Control", "max-age=3600")
			w.Write([]byte(`document.addEventListener("DOMContentLoaded", () => { document.getElementById("out").textContent += " Bundle ran."; });`))
		},
	}
}

// TestRenderRevisitCache: with IsolationWipe, a site rendered again (interleaved with
// another) gets its bundle from the context's cache, while its main document always comes
// from the origin, even when the same URL is fresh in the cache. With IsolationContext
// every render fetches the bundle again.
func TestRenderRevisitCache(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	f := getFixture(t)
	for _, tt := range []struct {
		mode        Isolation
		wantBundles int // bundle requests over the site's first two renders
	}{{IsolationWipe, 1}, {IsolationContext, 2}} {
		t.Run(string(tt.mode), func(t *testing.T) {
			o := newSiteOrigin(t, cachedHandlers())
			p := o.pool(t, Config{Isolation: tt.mode, Concurrency: 1})
			site, other := siteName(5), siteName(6)
			mark := o.mark()
			for i, hp := range []string{site + "/p1", other + "/p1", site + "/p2", site + "/p1"} {
				out := p.Render(context.Background(), f.url(hp), nil, safetyTimeout(t))
				if out.FailReason != "" || !strings.Contains(out.Text, "Bundle ran.") {
					t.Fatalf("render %d of %s: fail_reason=%s text %q", i, hp, failReason(out), out.Text)
				}
				if i == 2 {
					got := o.requests(mark, func(host, path string) bool { return host == site && path == "/bundle.js" })
					if len(got) != tt.wantBundles {
						t.Errorf("the bundle reached the origin %d times over the site's first two renders, want %d", len(got), tt.wantBundles)
					}
				}
			}
			if got := o.requests(mark, func(host, path string) bool { return host == site && path == "/p1" }); len(got) != 2 {
				t.Errorf("%s/p1 reached the origin %d times in two renders: its main document must always come from the origin", site, len(got))
			}
		})
	}
}

// TestRenderContextRecycling: with IsolationWipe, a context is disposed of after
// MaxContextRenders renders, and the browser keeps no more contexts than the pool can
// use; closing the pool leaves no process, tab or temporary directory (TestMain checks).
func TestRenderContextRecycling(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	o := newSiteOrigin(t, stateHandlers())
	p := o.poolOwnBrowser(t, Config{Isolation: IsolationWipe, Concurrency: 1, MaxContextRenders: 2}) // counts the browser's contexts
	f := getFixture(t)
	for i := range 7 {
		out := p.Render(context.Background(), f.url(siteName(1+i%3)+"/"), nil, safetyTimeout(t))
		if out.FailReason != "" || !strings.Contains(out.Text, "CLEAN") {
			t.Fatalf("render %d: fail_reason=%s text %q", i, failReason(out), out.Text)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), safetyTimeout(t))
	defer cancel()
	b, err := p.browserFor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cdp.Call(ctx, b.b, target.GetBrowserContexts, cdp.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	// 7 renders of at most 2 each took at least 4 contexts (one long-lived tab each); what
	// is left in the browser is the slot's tab's and, while the last one closes behind
	// Render, its replacement's.
	if made := int64(st.ContextCount) + st.RecycledContextCount; made < 4 || st.RecycledContextCount < 2 {
		t.Errorf("context_count=%d recycled_context_count=%d after 7 renders of 2 per context, want >= 4 made, >= 2 gone", st.ContextCount, st.RecycledContextCount)
	}
	// The one a recycled tab leaves may still be going.
	if n := len(res.BrowserContextIDs); n > 3 {
		t.Errorf("the browser has %d contexts (the pool counts %d), want at most 3", n, st.ContextCount)
	}
	targets, err := cdp.Call(ctx, b.b, target.GetTargets, target.GetTargetsParams{})
	if err != nil {
		t.Fatal(err)
	}
	pages := 0
	for _, ti := range targets.TargetInfos {
		if ti.Type == "page" && ti.BrowserContextID != "" && slices.Contains(res.BrowserContextIDs, ti.BrowserContextID) {
			pages++
		}
	}
	if pages > 3 {
		t.Errorf("%d tabs in the pool's contexts, want at most 3", pages)
	}
	p.Close()
	if st := p.Stats(); st.ContextCount != 0 {
		t.Errorf("context_count=%d after Close, want 0", st.ContextCount)
	}
}

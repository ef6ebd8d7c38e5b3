package render

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"downloader"
)

// TestRenderSendsRequestHeaders: a render sends the request's allow-listed headers with its
// main document (SPEC §5, request_headers) and not with the page's own sub-requests, and
// a main-document hop to another host gets them without Cookie.
func TestRenderSendsRequestHeaders(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	type seen struct{ cookie, lang, referer string }
	var mu sync.Mutex
	got := map[string]seen{}
	e := newHopEnvWith(t, 0, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Host+r.URL.Path] = seen{r.Header.Get("Cookie"), r.Header.Get("Accept-Language"), r.Header.Get("Referer")}
		mu.Unlock()
		switch r.URL.Path {
		case "/start":
			http.Redirect(w, r, "http://away.test/page", http.StatusFound)
		case "/page":
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, `<html><body><p>hello</p><script src="/s.js"></script></body></html>`)
		case "/s.js":
			w.Header().Set("Content-Type", "text/javascript")
			io.WriteString(w, `document.body.insertAdjacentHTML("beforeend", "<p>script ran</p>")`)
		}
	})
	headers := downloader.RequestHeaders{"Cookie": "consent=yes", "Accept-Language": "zh-TW", "Referer": "http://ref.test/"}
	render := func(u string) *downloader.Outcome {
		pu := getFixture(t).url(u)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		adm, err := e.l.Wait(ctx, pu.Hostname(), 0, downloader.IntervalSourceRequest, downloader.EntryRender)
		if err != nil {
			t.Fatal(err)
		}
		defer adm.Done()
		out := e.p.RenderWith(context.Background(), pu, &adm, downloader.RenderOptions{Timeout: safetyTimeout(t), Headers: headers})
		checkCause(t, out)
		return out
	}

	out := render("site.test/page")
	if out.FailReason != "" || out.TextLength == nil || *out.TextLength == 0 {
		t.Fatalf("render: %+v", out)
	}
	mu.Lock()
	if g := got["site.test/page"]; g != (seen{"consent=yes", "zh-TW", "http://ref.test/"}) {
		t.Errorf("main document sent %+v", g)
	}
	if g, ok := got["site.test/s.js"]; !ok || g.cookie != "" || g.referer == "http://ref.test/" {
		t.Errorf("the page's script sent %+v (seen %v): the request's headers are for its main document", g, ok)
	}
	mu.Unlock()

	out = render("hop.test/start")
	if out.FailReason != "" {
		t.Fatalf("render with a hop: %+v", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if g := got["hop.test/start"]; g.cookie != "consent=yes" || g.lang != "zh-TW" {
		t.Errorf("first document sent %+v", g)
	}
	if g := got["away.test/page"]; g.cookie != "" || g.lang != "zh-TW" {
		t.Errorf("a hop to another host sent %+v, want Accept-Language without Cookie", g)
	}
}

package render

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"downloader/htmltext"
	"downloader/netguard"
)

// todomvcApps are the TodoMVC apps the tests and the benchmark render: one per framework
// family the crawl meets.
var todomvcApps = []string{"react", "vue", "angularjs", "backbone", "emberjs", "knockoutjs", "mithril", "vanillajs"}

// todomvcDir is the unpacked npm package todomvc (scripts/setup-test.sh puts it in
// .cache/todomvc/package; TODOMVC_DIR overrides). Absent, the test skips, except in CI,
// where it fails: CI's setup fetches it.
func todomvcDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("TODOMVC_DIR")
	if dir == "" {
		dir = filepath.Join("..", ".cache", "todomvc", "package")
	}
	if _, err := os.Stat(filepath.Join(dir, "examples", "react", "index.html")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the npm package todomvc is not at %s (scripts/setup-test.sh fetches it): %v", dir, err)
		}
		t.Skipf("the npm package todomvc is not at %s (run scripts/setup-test.sh): %v", dir, err)
	}
	return dir
}

// crawlOrigin serves the TodoMVC package on every *.todo.test site and a page heavy with
// assets on every *.heavy.test site, and counts the requests it gets. Assets are cacheable
// for an hour, documents must be revalidated (Cache-Control: no-cache), as sites commonly
// serve them.
type crawlOrigin struct {
	srv      *http.Server
	port     string
	guard    *netguard.Guard
	requests atomic.Int64
}

func newCrawlOrigin(t testing.TB, todomvc string) *crawlOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &crawlOrigin{}
	_, o.port, _ = net.SplitHostPort(ln.Addr().String())
	files := http.FileServer(http.Dir(todomvc))
	o.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.requests.Add(1)
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		isDoc := strings.HasSuffix(r.URL.Path, "/") || strings.HasSuffix(r.URL.Path, ".html")
		if isDoc {
			w.Header().Set("Cache-Control", "no-cache")
		} else {
			w.Header().Set("Cache-Control", "public, max-age=3600")
		}
		if strings.HasSuffix(host, ".heavy.test") {
			serveHeavy(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})}
	go o.srv.Serve(ln)
	t.Cleanup(func() { o.srv.Close() })
	o.guard = netguard.New(netguard.Config{
		ConnectTo: []netguard.Rule{mustRule("*.todo.test:80:127.0.0.1:" + o.port), mustRule("*.heavy.test:80:127.0.0.1:" + o.port)},
		Resolver:  fakeResolver{}, Dialer: loopbackOnly{getFixture(t)},
	})
	return o
}

// Counts of the heavy page's assets: 5 stylesheets, 10 scripts, 10 images, 3 web fonts,
// 2 XHRs: 30 sub-requests.
const (
	heavyCSS     = 5
	heavyScripts = 10
	heavyImages  = 10
	heavyFonts   = 3
	heavyXHRs    = 2
)

// serveHeavy serves the heavy page and its assets.
func serveHeavy(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		var b strings.Builder
		b.WriteString("<!doctype html><html><head><meta charset=utf-8><title>A heavy page</title>\n")
		for i := range heavyCSS {
			fmt.Fprintf(&b, "<link rel=stylesheet href=/css/%d.css>\n", i)
		}
		b.WriteString("<style>")
		for i := range heavyFonts {
			fmt.Fprintf(&b, "@font-face{font-family:f%d;src:url(/font/%d.woff2) format('woff2')} .f%d{font-family:f%d,serif}\n", i, i, i, i)
		}
		b.WriteString("</style>\n")
		for i := range heavyScripts {
			fmt.Fprintf(&b, "<script src=/js/%d.js></script>\n", i)
		}
		b.WriteString("</head><body><h1 class=f0>A product page</h1>\n")
		for i := range heavyImages {
			fmt.Fprintf(&b, "<figure><img src=/img/%d.jpg width=400 height=300 alt=''><figcaption class=f%d>Photo %d of the product, from every side.</figcaption></figure>\n", i, i%heavyFonts, i+1)
		}
		b.WriteString("<div id=reviews class=f1>Loading reviews</div><div id=related class=f2>Loading related</div>\n")
		b.WriteString(`<script>
fetch("/api/reviews").then(r => r.json()).then(a => { document.getElementById("reviews").textContent = a.join(" "); });
fetch("/api/related").then(r => r.json()).then(a => { document.getElementById("related").textContent = a.join(" "); });
</script></body></html>`)
		w.Write([]byte(b.String()))
	case strings.HasPrefix(p, "/css/"):
		w.Header().Set("Content-Type", "text/css")
		fmt.Fprintf(w, "%s { margin: 0 } .c%s { color: #222 }\n", "figure", p)
		w.Write([]byte(strings.Repeat("/* a stylesheet of the size sites serve */\n", 400)))
	case strings.HasPrefix(p, "/js/"):
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprintf(w, "(function(){ var s = 0; for (var i = 0; i < 20000; i++) { s += i %% 7; } window['m%s'] = s; })();\n", strings.Trim(p, "/.js"))
		w.Write([]byte(strings.Repeat("// a module of the size bundles are split into\n", 600)))
	case strings.HasPrefix(p, "/img/"):
		w.Header().Set("Content-Type", "image/jpeg")
		w.Write(heavyBlob(120 << 10))
	case strings.HasPrefix(p, "/font/"):
		w.Header().Set("Content-Type", "font/woff2")
		w.Write(heavyBlob(60 << 10))
	case strings.HasPrefix(p, "/api/"):
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `["Text that arrives by XHR for %s, long enough to count as content.", "And a second item of it."]`, p)
	default:
		http.NotFound(w, r)
	}
}

// heavyBlob is n bytes standing for an image or a font (not a valid one: the browser
// downloads it whole before it can tell).
func heavyBlob(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 31)
	}
	return b
}

// url parses raw, which the origin serves.
func (o *crawlOrigin) url(raw string) *url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	return u
}

// todomvcURL is app's page on host.
func todomvcURL(host, app string) string {
	return "http://" + host + "/examples/" + app + "/index.html"
}

// TestRenderTodoMVC: real framework apps render their own DOM, and text_length is what the
// browser shows, less than every text node of that DOM (templates and hidden parts).
func TestRenderTodoMVC(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	dir := todomvcDir(t)
	o := newCrawlOrigin(t, dir)
	p, err := newPool(Config{Concurrency: 1, UserAgent: testUserAgent, Guard: o.guard, Logger: testLogger(t)}, onSharedBrowser(t, seams{}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f := getFixture(t)
	fewer := 0
	for i, app := range todomvcApps {
		out := p.Render(context.Background(), f.url(todomvcURL(fmt.Sprintf("t%d.todo.test", i), app)), nil, safetyTimeout(t))
		// Every text node of the rendered DOM, hidden ones and templates included.
		domText, _ := htmltext.VisibleTextLength(strings.NewReader(string(out.Body)))
		n := deref(out.TextLength)
		t.Logf("%s: text_length=%d raw_text_length=%d dom_text=%d subrequest_count=%d skipped_request_count=%d",
			app, n, deref(out.RawTextLength), domText, deref(out.HealthSignal.SubrequestCount), deref(out.HealthSignal.SkippedRequestCount))
		if out.FailReason != "" || out.HTTPStatus != 200 {
			t.Errorf("%s: fail_reason=%s http_status=%d", app, failReason(out), out.HTTPStatus)
			continue
		}
		if !strings.Contains(out.Text, "todos") || n <= deref(out.RawTextLength) || n > domText {
			t.Errorf("%s: text_length=%d raw_text_length=%d dom_text=%d text %.80q: want the app's own rendering (more than served, at most the DOM's text)", app, n, deref(out.RawTextLength), domText, out.Text)
		}
		if n < domText {
			fewer++
		}
	}
	// Several apps keep templates or hidden parts in their DOM that no reader sees.
	if fewer < 3 {
		t.Errorf("only %d apps read less than their DOM's text nodes, want >= 3", fewer)
	}
}

package render

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/security"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/origintest"
)

// guardOrigin serves the pages of the tests of the render's guards against loading other
// sites behind their limiter (SPEC §3).
func guardOrigin(w http.ResponseWriter, r *http.Request) {
	host := strings.Split(r.Host, ":")[0]
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch host + r.URL.Path {
	case "opener.test/":
		fmt.Fprint(w, openerPage)
	case "burst.test/":
		fmt.Fprint(w, burstPage("http://other.test/api/"))
	case "workerburst.test/": // the burst from a dedicated worker
		// The render waits for no request of a worker's: the page's own /hold request
		// keeps it until the worker has answered (holdPage).
		fmt.Fprint(w, holdPage(`const src = "let ok=0; const all=[]; for (let i=0;i<`+fmt.Sprint(burstCount)+`;i++) all.push(fetch('http://other.test/api/w'+i).then(r=>{if(r.ok)ok++},()=>{})); Promise.all(all).then(()=>postMessage(ok));";
const w = new Worker(URL.createObjectURL(new Blob([src], {type: "text/javascript"})));
w.onmessage = (m) => done("worker answered " + m.data);`))
	case "workerburst.test/hold":
		<-r.Context().Done()
	case "ownburst.test/":
		fmt.Fprint(w, burstPage("/api/"))
	default:
		if strings.HasPrefix(r.URL.Path, "/api/") {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Access-Control-Allow-Origin", "*")
			fmt.Fprint(w, `{"ok":true}`)
			return
		}
		fmt.Fprintf(w, "<!doctype html><html><body><p>%s%s</p></body></html>", host, r.URL.Path)
	}
}

// openerPage aims the renderer at victim.test every way a page can without a main-frame
// navigation: five popups, a target=_blank link and form, an iframe, and the speculative
// loads (prerender, prefetch, preconnect, DNS prefetch, speculation rules).
const openerPage = `<!doctype html><html><head><title>opener</title>
<link rel="prerender" href="http://victim.test/prerender">
<link rel="prefetch" href="http://victim.test/prefetch">
<link rel="preconnect" href="http://victim.test">
<link rel="preconnect" href="https://victim.test">
<link rel="prefetch" href="https://victim.test/prefetch">
<link rel="dns-prefetch" href="//victim.test">
<script type="speculationrules">{"prerender":[{"source":"list","urls":["http://victim.test/spec-prerender"]}],"prefetch":[{"source":"list","urls":["http://victim.test/spec-prefetch"]}]}</script>
</head><body><p>A page that aims the renderer at another site.</p>
<iframe src="http://victim.test/frame"></iframe>
<a id="a" href="http://victim.test/blank" target="_blank">link</a>
<form id="f" action="http://victim.test/form" target="_blank" method="post"><input name="q" value="1"></form>
<script>
for (let i = 0; i < 4; i++) { window.open("http://victim.test/popup" + i); }
window.open("https://victim.test/popup");
document.getElementById("a").click();
document.getElementById("f").submit();
</script>
</body></html>`

// burstCount is how many fetch() calls a burst page makes at once.
const burstCount = 30

// burstPage fires burstCount fetch() calls at prefix and writes how many were answered.
func burstPage(prefix string) string {
	return `<!doctype html><html><head><title>burst</title></head><body><p>A page that fires a burst.</p><p id="n"></p>
<script>
let ok = 0;
const all = [];
for (let i = 0; i < ` + fmt.Sprint(burstCount) + `; i++) {
  all.push(fetch("` + prefix + `" + i).then(r => { if (r.ok) ok++; }, () => {}));
}
Promise.all(all).then(() => { document.getElementById("n").textContent = "answered " + ok; });
</script></body></html>`
}

// guardEnv is a pool on the guard origin; with hops, it admits hops and frames through a
// recorder on a real limiter, as the service does.
type guardEnv struct {
	*hopEnv
	tlsAccepts *atomic.Int64 // TCP connections victim.test:443 accepted
}

func newGuardEnv(t *testing.T, hops bool, caps subrequestCaps) guardEnv {
	t.Helper()
	f := getFixture(t)
	o := origintest.New(http.HandlerFunc(guardOrigin))
	t.Cleanup(o.Close)
	rule, err := netguard.ParseConnectTo(o.ConnectTo())
	if err != nil {
		t.Fatal(err)
	}
	// victim.test:443 is a listener that counts the connections it accepts and closes
	// them: any packet toward it is a contact (SPEC §2).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepts atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			c.Close()
		}
	}()
	guard := netguard.New(netguard.Config{
		ConnectTo: []netguard.Rule{mustRule("victim.test:443:" + ln.Addr().String()), rule},
		Resolver:  fakeResolver{}, Dialer: loopbackOnly{f},
	})
	l := limiter.New(clock.Real{})
	rec := &hopRecorder{hops: limiterHops{l: l}}
	cfg := Config{
		Concurrency:            1,
		WarmTabs:               1,
		UserAgent:              testUserAgent,
		Guard:                  guard,
		Logger:                 testLogger(t),
		MaxSubrequestCount:     caps.total,
		MaxHostSubrequestCount: caps.perHost,
		NetworkIdleMax:         20 * time.Second, // a page holding itself open waits for its worker (holdPage)
	}
	var admitter HopAdmitter
	if hops {
		admitter = rec
	}
	p, err := newHopsPool(cfg, onSharedBrowser(t, seams{}), admitter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return guardEnv{&hopEnv{o: o, l: l, rec: rec, p: p}, &accepts}
}

// TestRenderLoadsNoOtherSite: a page that opens popups (window.open, a target=_blank link
// and form), embeds an iframe and asks for prerender, prefetch and preconnect, all to a
// host whose slot is taken, renders without that host receiving any request: the
// popups are refused and counted, the iframe is skipped and counted, and the speculative
// loads never go out.
func TestRenderLoadsNoOtherSite(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	e := newGuardEnv(t, true, subrequestCaps{})
	// victim.test's slot was used a moment ago, with an interval longer than any render
	// (the browser starts inside this one, and its safety timeout is long: see safetyTimeout).
	held, _, ok := e.l.Reserve(time.Now(), "victim.test", time.Hour, downloader.IntervalSourceRequest, downloader.EntryLease, time.Time{})
	if !ok {
		t.Fatal("no reservation")
	}
	held.Done()
	out := e.render(t, "opener.test/", 0, safetyTimeout(t))
	if out.FailReason != "" || out.HTTPStatus != 200 || !strings.Contains(out.Text, "aims the renderer") {
		t.Fatalf("fail_reason=%s http_status=%d text=%q, want the page", failReason(out), out.HTTPStatus, out.Text)
	}
	var got []string
	for _, a := range e.o.Arrivals() {
		if a.Host == "victim.test" {
			got = append(got, a.Path)
		}
	}
	if len(got) > 0 {
		t.Errorf("victim.test received %v while its slot was taken, want nothing", got)
	}
	if n := e.tlsAccepts.Load(); n != 0 {
		t.Errorf("victim.test:443 accepted %d connections, want none", n)
	}
	hs := out.HealthSignal
	if n := deref(hs.PopupCount); n != 7 {
		t.Errorf("popup_count=%d, want 7 (five window.open, a link and a form)", n)
	}
	if n := deref(hs.SkippedFrameCount); n != 1 {
		t.Errorf("skipped_frame_count=%d, want the iframe", n)
	}
	if got := e.rec.take(); len(got) != 1 || got[0] != "victim.test" {
		t.Errorf("admissions asked for: %v, want the iframe's [victim.test] only", got)
	}
	if got := e.requestCount("victim.test"); got != 1 {
		t.Errorf("victim.test: request_24h_count=%d, want only the reservation", got)
	}
	getFixture(t).noViolations(t)
}

// TestRenderSubrequestCaps: a page's burst of fetch() calls goes out only up to the
// render's caps, per other host and in total; the rest is refused before it is sent and
// counted. With a pauser (the service) the pauser counts; without one, the proxy does.
func TestRenderSubrequestCaps(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	const perHost, total = 5, 12
	for _, hops := range []bool{true, false} {
		t.Run(fmt.Sprintf("hops=%v", hops), func(t *testing.T) {
			e := newGuardEnv(t, hops, subrequestCaps{total: total, perHost: perHost})

			out := e.render(t, "burst.test/", 0, safetyTimeout(t))
			if out.FailReason != "" || out.HTTPStatus != 200 {
				t.Fatalf("fail_reason=%s http_status=%d", failReason(out), out.HTTPStatus)
			}
			if n := e.o.CountByHost()["other.test"]; n != perHost {
				t.Errorf("other.test received %d requests, want the cap %d", n, perHost)
			}
			if n := deref(out.HealthSignal.CappedSubrequestCount); n != burstCount-perHost {
				t.Errorf("capped_subrequest_count=%d, want %d", n, burstCount-perHost)
			}
			if want := fmt.Sprintf("answered %d", perHost); !strings.Contains(out.Text, want) {
				t.Errorf("text %q lacks %q", out.Text, want)
			}

			// A dedicated worker's requests are the page's too.
			out = e.render(t, "workerburst.test/", 0, safetyTimeout(t))
			if out.FailReason != "" || out.HTTPStatus != 200 {
				t.Fatalf("fail_reason=%s http_status=%d", failReason(out), out.HTTPStatus)
			}
			if n := e.o.CountByHost()["other.test"]; n != 2*perHost {
				t.Errorf("other.test received %d requests from the worker, want the cap %d", n-perHost, perHost)
			}
			if n := deref(out.HealthSignal.CappedSubrequestCount); n != burstCount-perHost {
				t.Errorf("worker: capped_subrequest_count=%d, want %d", n, burstCount-perHost)
			}
			if want := fmt.Sprintf("worker answered %d", perHost); !strings.Contains(out.Text, want) {
				t.Errorf("worker: text %q lacks %q", out.Text, want)
			}

			// The page's own host is bounded by the total only.
			out = e.render(t, "ownburst.test/", 0, safetyTimeout(t))
			if out.FailReason != "" || out.HTTPStatus != 200 {
				t.Fatalf("fail_reason=%s http_status=%d", failReason(out), out.HTTPStatus)
			}
			api := 0
			for _, a := range e.o.Arrivals() {
				if a.Host == "ownburst.test" && strings.HasPrefix(a.Path, "/api/") {
					api++
				}
			}
			capped := deref(out.HealthSignal.CappedSubrequestCount)
			if api > total || api < perHost+1 {
				t.Errorf("ownburst.test received %d API requests, want more than the per-host cap %d and at most the total %d", api, perHost, total)
			}
			if api+capped < burstCount || capped < burstCount-total {
				t.Errorf("%d API requests sent and capped_subrequest_count=%d, want every one of %d sent or capped", api, capped, burstCount)
			}
		})
	}
	getFixture(t).noViolations(t)
}

// TestRenderSubrequestCapsHTTPS: over HTTPS, where the proxy sees one tunnel for many
// requests, the pauser still lets only the per-host cap of a burst reach the other host.
func TestRenderSubrequestCapsHTTPS(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	f := getFixture(t)
	const perHost = 4
	var mu sync.Mutex
	apiCount := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "tls-other.test" && strings.HasPrefix(r.URL.Path, "/api/") {
			mu.Lock()
			apiCount++
			mu.Unlock()
			w.Header().Set("Access-Control-Allow-Origin", "*")
			fmt.Fprint(w, `{"ok":true}`)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, burstPage("https://tls-other.test/api/"))
	}))
	// The browser's first handshake to each host ends with an unknown-certificate alert.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	guard := netguard.New(netguard.Config{
		ConnectTo: []netguard.Rule{mustRule("tls-burst.test:443:127.0.0.1:" + port), mustRule("tls-other.test:443:127.0.0.1:" + port)},
		Resolver:  fakeResolver{}, Dialer: loopbackOnly{f},
	})
	l := limiter.New(clock.Real{})
	p, err := newHopsPool(Config{Concurrency: 1, WarmTabs: -1, UserAgent: testUserAgent, Guard: guard,
		Logger: testLogger(t), MaxHostSubrequestCount: perHost}, onSharedBrowser(t, seams{extraFlags: []string{"ignore-certificate-errors"}}), limiterHops{l: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), safetyTimeout(t))
	defer cancel()
	b, err := p.browserFor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The test server's certificate is for no .test name.
	if _, err := cdp.Call(ctx, b.b, security.SetIgnoreCertificateErrors, security.SetIgnoreCertificateErrorsParams{Ignore: true}); err != nil {
		t.Fatal(err)
	}
	out := p.Render(context.Background(), f.url("https://tls-burst.test/"), nil, safetyTimeout(t))
	checkCause(t, out)
	if out.FailReason != "" || out.HTTPStatus != 200 {
		t.Fatalf("fail_reason=%s http_status=%d", failReason(out), out.HTTPStatus)
	}
	mu.Lock()
	got := apiCount
	mu.Unlock()
	if got != perHost {
		t.Errorf("tls-other.test received %d requests, want the cap %d", got, perHost)
	}
	if n := deref(out.HealthSignal.CappedSubrequestCount); n != burstCount-perHost {
		t.Errorf("capped_subrequest_count=%d, want %d", n, burstCount-perHost)
	}
	f.noViolations(t)
}

func TestAdmitSubrequest(t *testing.T) {
	type req struct {
		domain string
		want   bool
	}
	tests := []struct {
		name string
		caps subrequestCaps
		hop  string // an admitted hop's domain: the page's own too
		reqs []req
	}{
		{"per other host", subrequestCaps{total: 10, perHost: 2}, "", []req{
			{"other.test", true}, {"other.test", true}, {"other.test", false},
			{"third.test", true}, {"page.test", true}, {"page.test", true}, {"page.test", true},
		}},
		{"total, the page's host included", subrequestCaps{total: 3, perHost: 2}, "", []req{
			{"page.test", true}, {"page.test", true}, {"other.test", true}, {"page.test", false}, {"other.test", false},
		}},
		{"an admitted hop's host is the page's", subrequestCaps{total: 10, perHost: 1}, "hop.test", []req{
			{"hop.test", true}, {"hop.test", true}, {"other.test", true}, {"other.test", false},
		}},
		{"a refusal at the per-host cap spends nothing of the total", subrequestCaps{total: 2, perHost: 1}, "", []req{
			{"other.test", true}, {"other.test", false}, {"page.test", true}, {"page.test", false},
		}},
		{"no caps", subrequestCaps{}, "", []req{{"other.test", true}, {"other.test", true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newRenderState(clock.Real{}, "page.test", nil)
			st.caps = tt.caps
			if tt.hop != "" {
				st.addHop(tt.hop, limiter.Admission{})
			}
			refused := 0
			for i, r := range tt.reqs {
				if got := st.admitSubrequest(r.domain); got != r.want {
					t.Errorf("request %d to %s: admitted=%v, want %v", i, r.domain, got, r.want)
				}
				if !r.want {
					refused++
				}
			}
			if got := st.guardCounts().capped; got != refused {
				t.Errorf("capped=%d, want %d", got, refused)
			}
		})
	}
}

func TestIsSpeculative(t *testing.T) {
	tests := []struct {
		name string
		typ  network.ResourceType
		hdr  network.Headers
		want bool
	}{
		{"link prefetch", network.ResourceTypePrefetch, nil, true},
		{"Sec-Purpose prefetch", network.ResourceTypeDocument, network.Headers{"Sec-Purpose": "prefetch;prerender"}, true},
		{"Purpose prefetch", network.ResourceTypeScript, network.Headers{"purpose": "prefetch"}, true},
		{"a document", network.ResourceTypeDocument, network.Headers{"Accept": "text/html"}, false},
		{"a fetch", network.ResourceTypeFetch, nil, false},
	}
	for _, tt := range tests {
		e := &fetch.EventRequestPaused{ResourceType: tt.typ, Request: &network.Request{URL: "http://x.test/", Headers: tt.hdr}}
		if got := isSpeculative(e); got != tt.want {
			t.Errorf("%s: isSpeculative=%v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPauserDecide: what the pauser does with each kind of paused request. A request of a
// type the render skips is failed and counted skipped (not a sub-request, so not under
// the caps); a document is never skipped; with no render armed nothing goes out.
func TestPauserDecide(t *testing.T) {
	const main = cdp.FrameID("main")
	paused := func(frame cdp.FrameID, typ network.ResourceType, url string) *fetch.EventRequestPaused {
		return &fetch.EventRequestPaused{FrameID: frame, ResourceType: typ, Request: &network.Request{URL: url}}
	}
	skip := newSkipSet(downloader.DefaultSkipResourceTypes())
	tests := []struct {
		name   string
		armed  bool
		skip   skipSet
		before []*fetch.EventRequestPaused // decided first (the main document)
		e      *fetch.EventRequestPaused
		want   decision
	}{
		{"first main document", true, skip, nil, paused(main, network.ResourceTypeDocument, "http://a.test/"), decideContinue},
		{"an image, skipped", true, skip, nil, paused(main, network.ResourceTypeImage, "http://a.test/x.png"), decideSkip},
		{"a font on another host, skipped", true, skip, nil, paused(main, network.ResourceTypeFont, "http://cdn.test/f.woff2"), decideSkip},
		{"an image, nothing skipped", true, nil, nil, paused(main, network.ResourceTypeImage, "http://a.test/x.png"), decideSubrequest},
		{"a script, not skipped", true, skip, nil, paused(main, network.ResourceTypeScript, "http://a.test/app.js"), decideSubrequest},
		{"a prefetch, skipped", true, newSkipSet([]downloader.ResourceType{downloader.ResourcePrefetch}), nil, paused(main, network.ResourceTypePrefetch, "http://b.test/"), decideSkip},
		{"a prefetch, not skipped: speculative", true, skip, nil, paused(main, network.ResourceTypePrefetch, "http://b.test/"), decideFail},
		{"a later main document: a hop", true, skip, []*fetch.EventRequestPaused{paused(main, network.ResourceTypeDocument, "http://a.test/")}, paused(main, network.ResourceTypeDocument, "http://b.test/"), decideAdmit},
		{"a cross-host iframe", true, skip, []*fetch.EventRequestPaused{paused(main, network.ResourceTypeDocument, "http://a.test/")}, paused("frame", network.ResourceTypeDocument, "http://b.test/"), decideAdmitFrame},
		{"no render armed: an image", false, skip, nil, paused(main, network.ResourceTypeImage, "http://a.test/x.png"), decideFail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var wg sync.WaitGroup
			p := newPauser(testLogger(t), &wg)
			p.setMainFrame(main)
			if tt.armed {
				p.arm(&hopRender{ctx: context.Background(), st: newRenderState(clock.Real{}, "a.test", nil), skip: tt.skip})
			}
			for _, e := range tt.before {
				p.decide(e)
			}
			if _, _, got := p.decide(tt.e); got != tt.want {
				t.Errorf("decision %d, want %d", got, tt.want)
			}
		})
	}
}

package render

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/origintest"
)

// The tests of SPEC §3's "every connection a render opens counts, whatever opens it":
// WebSocket handshakes (ws: and wss:, each a CONNECT tunnel on Chromium), dedicated and
// shared workers, beacons. other.test is a plain-http host of origintest, tother.test an
// HTTPS one; both are hosts other than the page's, each under the per-host cap.

// floodCount is how many WebSockets, worker fetches or beacons a page fires per host.
const floodCount = 120

// wsAccept answers a WebSocket handshake (RFC 6455 §4.2.2) and ends the exchange.
func wsAccept(w http.ResponseWriter, r *http.Request) {
	h := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	w.Header().Set("Upgrade", "websocket")
	w.Header().Set("Connection", "Upgrade")
	w.Header().Set("Sec-WebSocket-Accept", base64.StdEncoding.EncodeToString(h[:]))
	w.WriteHeader(http.StatusSwitchingProtocols)
}

// holdPage is a page whose script body runs while a request of its own to /hold stays in
// flight, so that the render reads it only once the script calls done(text): nothing a
// WebSocket or a worker does is a request the render waits for.
func holdPage(body string) string {
	return `<!doctype html><html><body><p id="n">start</p><script>
const ctl = new AbortController();
fetch("/hold", {signal: ctl.signal}).catch(() => {});
function done(s) { document.getElementById("n").textContent = s; ctl.abort(); }
` + body + `</script></body></html>`
}

// wsFlood opens n WebSockets to prefix+i and reports how many opened once all settled.
func wsFlood(prefix string, n int) string {
	return fmt.Sprintf(`let settled = 0, opened = 0;
for (let i = 0; i < %d; i++) {
  const s = new WebSocket(%q + i);
  let over = false;
  const end = (ok) => { if (over) return; over = true; if (ok) opened++; if (++settled == %d) done("settled " + settled + " opened " + opened); };
  s.onopen = () => { end(true); s.close(); };
  s.onerror = () => end(false);
  s.onclose = () => end(false);
}
`, n, prefix, n)
}

// fetchFlood fires n fetch() calls at prefix+i, counting the answered ones in ok and the
// promises in all (declared by the caller).
func fetchFlood(prefix string, n int) string {
	return fmt.Sprintf(`for (let i = 0; i < %d; i++) all.push(fetch(%q + i).then(r => { if (r.ok) ok++; }, () => {}));`, n, prefix)
}

// everyConnHandler serves the pages of these tests on every host.
func everyConnHandler(w http.ResponseWriter, r *http.Request) {
	host := strings.Split(r.Host, ":")[0]
	switch {
	case r.URL.Path == "/hold":
		<-r.Context().Done()
		return
	case strings.HasPrefix(r.URL.Path, "/ws"):
		wsAccept(w, r)
		return
	case strings.HasPrefix(r.URL.Path, "/api/"):
		w.Header().Set("Access-Control-Allow-Origin", "*")
		fmt.Fprint(w, `{"ok":true}`)
		return
	}
	js := func(s string) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, s)
	}
	page := func(s string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, holdPage(s))
	}
	const half = floodCount / 2
	switch host + r.URL.Path {
	case "wsflood.test/":
		page(wsFlood("ws://other.test/ws", floodCount))
	case "wssflood.test/":
		page(wsFlood("wss://tother.test/ws", floodCount))
	case "shared.test/":
		page(`if (typeof SharedWorker === "undefined") { done("no SharedWorker"); } else {
  const sw = new SharedWorker("/shared.js"); sw.port.onmessage = (m) => done("worker " + m.data); sw.port.start(); }`)
	case "shared.test/shared.js":
		js(`let ok = 0; const all = []; onconnect = (e) => { const port = e.ports[0]; ` +
			fetchFlood("http://other.test/api/s", half) + fetchFlood("https://tother.test/api/s", half) +
			` Promise.all(all).then(() => port.postMessage(ok)); };`)
	case "dedicated.test/":
		page(`const w = new Worker("/dedicated.js"); w.onmessage = (m) => done("worker " + m.data);`)
	case "dedicated.test/dedicated.js":
		js(`let ok = 0; const all = []; ` + fetchFlood("http://other.test/api/d", half) + fetchFlood("https://tother.test/api/d", half) +
			` Promise.all(all).then(() => postMessage(ok));`)
	case "beacon.test/":
		// A beacon is a request of the page's: the render waits for it as for any other.
		page(fmt.Sprintf(`let n = 0; for (let i = 0; i < %d; i++) {
  if (navigator.sendBeacon("http://other.test/api/b" + i, "x")) n++;
  if (navigator.sendBeacon("https://tother.test/api/b" + i, "x")) n++; }
done("beacons " + n);`, half))
	default:
		http.NotFound(w, r)
	}
}

// everyConnEnv is a pool with a pauser (as the service runs it) under per-host cap
// perHost, in front of the plain-http origin and an HTTPS one (tother.test:443) that
// counts what it receives by host and path prefix.
type everyConnEnv struct {
	p   hopsPool
	o   *origintest.Origin
	mu  sync.Mutex
	tls []string // "host/path" of every request the HTTPS origin received
}

func newEveryConnEnv(t *testing.T, perHost int) *everyConnEnv {
	t.Helper()
	f := getFixture(t)
	e := &everyConnEnv{o: origintest.New(http.HandlerFunc(everyConnHandler))}
	t.Cleanup(e.o.Close)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.tls = append(e.tls, strings.Split(r.Host, ":")[0]+r.URL.Path)
		e.mu.Unlock()
		everyConnHandler(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	rule, err := netguard.ParseConnectTo(e.o.ConnectTo())
	if err != nil {
		t.Fatal(err)
	}
	guard := netguard.New(netguard.Config{
		ConnectTo: []netguard.Rule{mustRule("tother.test:443:127.0.0.1:" + port), rule},
		Resolver:  fakeResolver{}, Dialer: loopbackOnly{f},
	})
	p, err := newHopsPool(Config{
		Concurrency: 1, WarmTabs: -1, UserAgent: testUserAgent, Guard: guard,
		// A page is read once its script calls done (its /hold request in flight until
		// then), however long a loaded machine takes.
		NetworkIdleMax:         25 * time.Second,
		Logger:                 testLogger(t),
		MaxHostSubrequestCount: perHost,
	}, onSharedBrowser(t, seams{
		// The test server's certificate names no .test host: taken at the first
		// handshake, as a real site's is.
		extraFlags: []string{"ignore-certificate-errors"},
	}), limiterHops{l: limiter.New(clock.Real{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	e.p = p
	return e
}

// tlsCount is how many requests the HTTPS origin received for host with a path that
// starts with prefix.
func (e *everyConnEnv) tlsCount(host, prefix string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, hp := range e.tls {
		if strings.HasPrefix(hp, host+prefix) {
			n++
		}
	}
	return n
}

// httpCount is how many requests the plain-http origin received for host with a path
// that starts with prefix.
func (e *everyConnEnv) httpCount(host, prefix string) int {
	n := 0
	for _, a := range e.o.Arrivals() {
		if a.Host == host && strings.HasPrefix(a.Path, prefix) {
			n++
		}
	}
	return n
}

func (e *everyConnEnv) render(t *testing.T, u string) (text string, sub, failed, capped int) {
	t.Helper()
	out := e.p.Render(context.Background(), getFixture(t).url(u), nil, 30*time.Second)
	checkCause(t, out)
	if out.FailReason != "" || out.HTTPStatus != 200 {
		t.Fatalf("%s: fail_reason=%s http_status=%d", u, failReason(out), out.HTTPStatus)
	}
	hs := out.HealthSignal
	return out.Text, deref(hs.SubrequestCount), deref(hs.SubrequestFailedCount), deref(hs.CappedSubrequestCount)
}

// TestRenderCapsWebSockets: a page that opens 120 WebSockets to another host, over ws:
// and over wss: (each a CONNECT tunnel of its own on Chromium, which no pauser sees): the
// host receives at most the per-host cap of handshakes, and the health signal counts
// every one, the refused ones capped.
func TestRenderCapsWebSockets(t *testing.T) {
	t.Parallel()
	const perHost = 5
	e := newEveryConnEnv(t, perHost)
	for _, c := range []struct{ page, host string }{{"wsflood.test/", "other.test"}, {"wssflood.test/", "tother.test"}} {
		text, sub, failed, capped := e.render(t, c.page)
		if want := fmt.Sprintf("settled %d", floodCount); !strings.Contains(text, want) {
			t.Errorf("%s: text %q lacks %q: the page did not try every socket", c.page, text, want)
		}
		got := e.httpCount(c.host, "/ws")
		if c.host == "tother.test" {
			got = e.tlsCount(c.host, "/ws")
		}
		if got > perHost || got == 0 {
			t.Errorf("%s: %s received %d WebSocket handshakes, want 1 to the per-host cap %d", c.page, c.host, got, perHost)
		}
		if capped < floodCount-perHost {
			t.Errorf("%s: capped_subrequest_count=%d, want at least %d", c.page, capped, floodCount-perHost)
		}
		if sub < floodCount || failed < capped {
			t.Errorf("%s: subrequest_count=%d subrequest_failed_count=%d, want every socket counted (%d), the refused ones failed (%d)", c.page, sub, failed, floodCount, capped)
		}
	}
	getFixture(t).noViolations(t)
}

// TestRenderCapsWorkersAndBeacons: a SharedWorker and a dedicated Worker that each send
// 120 fetch() calls to two other hosts (half over HTTP, half over HTTPS), and a page that
// sends 120 beacons the same way: no host receives more than the per-host cap. The local
// browser has no SharedWorker (its HTTPS requests could ride an admitted tunnel unseen);
// the page's pauser counts a dedicated worker's requests and its beacons.
func TestRenderCapsWorkersAndBeacons(t *testing.T) {
	t.Parallel()
	const perHost = 5
	const half = floodCount / 2
	e := newEveryConnEnv(t, perHost)

	text, _, _, _ := e.render(t, "shared.test/")
	if h, s := e.httpCount("other.test", "/api/s"), e.tlsCount("tother.test", "/api/s"); h > perHost || s > perHost {
		t.Errorf("shared worker: other.test received %d requests, tother.test %d, want at most the per-host cap %d (text %q)", h, s, perHost, text)
	}
	if text != "no SharedWorker" {
		t.Errorf("shared worker: text %q, want the local browser without SharedWorker", text)
	}

	for _, c := range []struct{ page, prefix, want string }{
		{"dedicated.test/", "/api/d", fmt.Sprintf("worker %d", 2*perHost)},
		{"beacon.test/", "/api/b", fmt.Sprintf("beacons %d", floodCount)},
	} {
		text, _, _, capped := e.render(t, c.page)
		if !strings.Contains(text, c.want) {
			t.Errorf("%s: text %q lacks %q", c.page, text, c.want)
		}
		h, s := e.httpCount("other.test", c.prefix), e.tlsCount("tother.test", c.prefix)
		if h > perHost || s > perHost {
			t.Errorf("%s: other.test received %d requests, tother.test %d, want at most the per-host cap %d", c.page, h, s, perHost)
		}
		if capped != 2*(half-perHost) {
			t.Errorf("%s: capped_subrequest_count=%d, want %d", c.page, capped, 2*(half-perHost))
		}
	}
	getFixture(t).noViolations(t)
}

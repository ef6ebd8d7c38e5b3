package render

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"
)

// openNetwork is the network outside our guard, as a renderer that goes around our proxy
// would reach it: a forward proxy (the renderer's own --proxy-server) that takes every
// .test name straight to an origin listener of its own, without our guard, --connect-to
// or wire gate, and fails every other name as a real network would fail a name that does
// not resolve (no DNS is asked). Every request that went around our guard is counted
// where it lands: at that origin.
type openNetwork struct {
	f      *fixture
	proxy  *http.Server
	origin *http.Server
	wg     sync.WaitGroup

	proxyAddr, originAddr string

	mu       sync.Mutex
	hits     map[string]int // host → requests that reached the origin around our guard
	refused  int            // requests for names the open network does not know
	released chan struct{}  // /relay/wait answers once this is closed
	waitHit  chan struct{}  // a request reached /relay/wait
}

func newOpenNetwork(t testing.TB) *openNetwork {
	t.Helper()
	n := &openNetwork{f: getFixture(t), hits: map[string]int{}, released: make(chan struct{}), waitHit: make(chan struct{}, 16)}
	oln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.originAddr, n.proxyAddr = oln.Addr().String(), pln.Addr().String()
	n.origin = &http.Server{Handler: http.HandlerFunc(n.serveOrigin)}
	var d net.Dialer
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, n.originAddr)
		},
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = pr.In.Host
			pr.Out.Host = pr.In.Host
		},
		Transport: tr,
	}
	n.proxy = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if r.Method == http.MethodConnect || !strings.HasSuffix(host, ".test") {
			n.mu.Lock()
			n.refused++
			n.mu.Unlock()
			http.Error(w, "no such host", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	n.wg.Go(func() { n.origin.Serve(oln) })
	n.wg.Go(func() { n.proxy.Serve(pln) })
	t.Cleanup(func() {
		n.release()
		n.proxy.Close()
		n.origin.Close()
		tr.CloseIdleConnections()
		n.wg.Wait()
	})
	return n
}

// proxyURL is the renderer's own proxy, the way out to the open network.
func (n *openNetwork) proxyURL() string { return "http://" + n.proxyAddr }

// release lets /relay/wait answer.
func (n *openNetwork) release() {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.released:
	default:
		close(n.released)
	}
}

// unguarded returns the requests that reached the origin around our guard, by host.
func (n *openNetwork) unguarded() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]int{}
	for h, c := range n.hits {
		out[h] = c
	}
	return out
}

func (n *openNetwork) unguardedCount() int {
	total := 0
	for _, c := range n.unguarded() {
		total += c
	}
	return total
}

// serveOrigin serves the relay tests' own pages under /relay/ and the fixture's
// everywhere else.
func (n *openNetwork) serveOrigin(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	n.mu.Lock()
	n.hits[host]++
	n.mu.Unlock()
	serveRelayPage(w, r, n.released, n.waitHit, n.f)
}

// serveRelayPage serves the pages the relay tests render, on whichever origin they reach.
func serveRelayPage(w http.ResponseWriter, r *http.Request, released <-chan struct{}, waitHit chan<- struct{}, f *fixture) {
	switch r.URL.Path {
	case "/relay/script.html":
		// An external script that writes the article, and an XHR.
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><head><title>script</title>
<script src="/relay/app.js"></script></head>
<body><p id="static">Static text served with the page.</p>
<script>var x = new XMLHttpRequest(); x.open("GET", "/relay/api"); x.send();</script>
</body></html>`)
	case "/relay/app.js":
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `document.addEventListener("DOMContentLoaded", function () {
  var p = document.createElement("p"); p.textContent = "The external script ran."; document.body.appendChild(p);
});`)
	case "/relay/api":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"is_ok":true}`)
	case "/relay/wait":
		select {
		case waitHit <- struct{}{}:
		default:
		}
		select {
		case <-released:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><body><p>Waited for.</p></body></html>`)
	case "/relay/failing":
		// A fetch Chromium refuses to send (an unsafe port): a failed request.
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><body><p>Failing.</p>
<script>window.xhrDone = fetch("http://js.test:1/").then(() => false, () => true);</script></body></html>`)
	case "/relay/ua":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html><body><p id="ua">%s</p></body></html>`, r.Header.Get("User-Agent"))
	default:
		f.ServeHTTP(w, r)
	}
}

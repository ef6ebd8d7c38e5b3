package renderproxy

import (
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"downloader"
)

// CanarySuffix ends the canary's host names. .invalid never resolves (RFC 6761): only a
// proxy of ours answers it, so a server that sends the canary anywhere else gets no page,
// and nothing reaches any origin.
const CanarySuffix = ".canary.invalid"

// Guard is the one long-lived proxy of ours for a CDP server that has no proxy per
// browser context (Obscura ignores proxyServer; its contexts use `serve --proxy`): the
// operator starts the server with --proxy pointing here. It serves the canary itself and
// hands every other request to the proxy of the render it belongs to (Proxy.ServeHTTP:
// the Guard, --connect-to, the wire gate, the sub-request caps and the counts apply as
// with a per-context proxy). A request that no render in flight can own is refused
// without dialling anything: nothing goes out outside a render (SPEC §3).
//
// Which render a request belongs to is told by its host: the render of that page's
// domain, else the one its Referer names (plain HTTP only: a CONNECT carries none), else
// the oldest render in flight (a warm tab's proxy, armed with no render yet, owns nothing). With renders of several sites at once, a sub-request to a
// third host over HTTPS may be counted against another render's caps; it is guarded and
// capped all the same. Safe for concurrent use.
type Guard struct {
	ln  net.Listener
	srv *http.Server
	log *slog.Logger
	wg  sync.WaitGroup

	mu       sync.Mutex
	renders  []*Proxy           // the armed proxies of the renders in flight, oldest first
	canaries map[string]*Canary // token → the canary being rendered

	refusedCount atomic.Int64 // requests that no render owned

	// With TLS termination (StartTermination): our CA, and the inner server of the
	// requests read inside the CONNECTs. nil: a CONNECT is a tunnel of its render's proxy.
	ca      *Authority
	inner   *http.Server
	innerLn *connQueue
}

// NewGuard serves on ln until Close.
func NewGuard(ln net.Listener, logger *slog.Logger) *Guard {
	g := &Guard{ln: ln, log: logger, canaries: make(map[string]*Canary)}
	g.srv = &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	g.wg.Go(func() { g.srv.Serve(ln) })
	return g
}

// Addr is the guard proxy's listening address.
func (g *Guard) Addr() string { return g.ln.Addr().String() }

// Close stops serving; the renders' own proxies close their tunnels themselves.
func (g *Guard) Close() {
	g.srv.Close()
	if g.inner != nil {
		g.inner.Close()
	}
	g.wg.Wait()
}

// CA is the authority the guard proxy terminates TLS under; nil: it does not (a CONNECT
// is a tunnel of its render's proxy).
func (g *Guard) CA() *Authority { return g.ca }

// Attach makes px (armed with its render) own its render's requests until detach is
// called.
func (g *Guard) Attach(px *Proxy) (detach func()) {
	g.mu.Lock()
	g.renders = append(g.renders, px)
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			for i, x := range g.renders {
				if x == px {
					g.renders = append(g.renders[:i], g.renders[i+1:]...)
					return
				}
			}
		})
	}
}

// route returns the proxy of the render r belongs to, nil when none is in flight.
func (g *Guard) route(r *http.Request) *Proxy {
	host := r.Host
	if r.Method != http.MethodConnect && r.URL.Host != "" {
		host = r.URL.Host
	}
	domain, _ := downloader.CanonicalHost(host)
	var referer string
	if ref, err := url.Parse(r.Header.Get("Referer")); err == nil && ref.Host != "" {
		referer, _ = downloader.CanonicalHost(ref.Host)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var byReferer, oldest *Proxy
	for _, px := range g.renders {
		st := px.state()
		if st == nil {
			continue // a warm tab's: no render yet
		}
		if st.Domain() == domain {
			return px
		}
		if byReferer == nil && referer != "" && st.Domain() == referer {
			byReferer = px
		}
		if oldest == nil {
			oldest = px
		}
	}
	if byReferer != nil {
		return byReferer
	}
	return oldest
}

func (g *Guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect && g.ca != nil {
		g.terminate(w, r)
		return
	}
	g.serve(w, r)
}

// serve answers a request of the server's, plain or read inside a terminated CONNECT.
func (g *Guard) serve(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.HasSuffix(strings.ToLower(host), CanarySuffix) {
		g.serveCanary(w, r, strings.ToLower(host))
		return
	}
	px := g.route(r)
	if px == nil {
		n := g.refusedCount.Add(1)
		g.log.Warn("render: a request outside any render reached the guard proxy; refused", "host", host, "refused_count", n)
		http.Error(w, "render proxy: no render in progress", http.StatusForbidden)
		return
	}
	px.ServeHTTP(w, r)
}

// Canary is one canary render: what the guard proxy saw of it.
type Canary struct {
	token     string
	document  chan struct{} // closed when the page was asked for
	subSeen   chan struct{} // closed when its sub-request was
	onceDoc   sync.Once
	onceSub   sync.Once
	hostLabel string
	isTLS     bool // its sub-request is https://: the server must trust our CA
}

// ExpectCanary makes the guard proxy answer the canary host of a new token until the
// returned cancel is called.
// With isTLS its sub-request is https://, which only a terminating guard proxy answers.
func (g *Guard) ExpectCanary(token string, isTLS bool) (*Canary, func()) {
	c := &Canary{token: token, document: make(chan struct{}), subSeen: make(chan struct{}), hostLabel: token + CanarySuffix, isTLS: isTLS}
	g.mu.Lock()
	g.canaries[c.hostLabel] = c
	g.mu.Unlock()
	return c, func() {
		g.mu.Lock()
		delete(g.canaries, c.hostLabel)
		g.mu.Unlock()
	}
}

// URL is the canary's page.
func (c *Canary) URL() string { return "http://" + c.hostLabel + "/" }

// Document is closed when the canary's page was asked for.
func (c *Canary) Document() <-chan struct{} { return c.document }

// SubSeen is closed when the canary's sub-request was.
func (c *Canary) SubSeen() <-chan struct{} { return c.subSeen }

// serveCanary answers the canary's page and its sub-request; nothing else is dialled.
func (g *Guard) serveCanary(w http.ResponseWriter, r *http.Request, host string) {
	g.mu.Lock()
	c := g.canaries[host]
	g.mu.Unlock()
	if c == nil || r.Method == http.MethodConnect {
		http.Error(w, "render proxy: no such canary", http.StatusNotFound)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	switch r.URL.Path {
	case "/":
		c.onceDoc.Do(func() { close(c.document) })
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		src := "/" + c.token + ".js"
		if c.isTLS {
			src = "https://" + c.hostLabel + src
		}
		fmt.Fprintf(w, "<!doctype html><html><head><title>canary</title><script src=\"%s\"></script></head><body><p>canary</p></body></html>", src)
	case "/" + c.token + ".js":
		if c.isTLS != (r.TLS != nil) {
			http.NotFound(w, r)
			return
		}
		c.onceSub.Do(func() { close(c.subSeen) })
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprintf(w, "document.title = %q;", c.token)
	default:
		http.NotFound(w, r)
	}
}

package render

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"

	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
)

// siteOrigin is a local origin that serves the same paths on many site names
// (s1.site.test … s40.site.test, every one mapped to its 127.0.0.1 listener by
// --connect-to), for the tests of what a render loads and what it keeps between renders.
// It counts every request it gets.
type siteOrigin struct {
	ln    net.Listener
	srv   *http.Server
	port  string
	guard *netguard.Guard
	mux   map[string]http.HandlerFunc // by path

	mu   sync.Mutex
	reqs []http.Request
}

// siteCount is how many site names the origin answers to.
const siteCount = 40

func siteName(i int) string { return fmt.Sprintf("s%d.site.test", i) }

// newSiteOrigin starts an origin serving handlers (by path, on every site name); it is
// closed when the test ends.
func newSiteOrigin(t testing.TB, handlers map[string]http.HandlerFunc) *siteOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &siteOrigin{ln: ln, mux: handlers}
	_, o.port, _ = net.SplitHostPort(ln.Addr().String())
	o.srv = &http.Server{Handler: o}
	go o.srv.Serve(ln)
	t.Cleanup(func() { o.srv.Close() })
	var rules []netguard.Rule
	for i := range siteCount {
		rules = append(rules, mustRule(siteName(i+1)+":80:127.0.0.1:"+o.port))
	}
	o.guard = netguard.New(netguard.Config{ConnectTo: rules, Resolver: fakeResolver{}, Dialer: loopbackOnly{getFixture(t)}})
	return o
}

func (o *siteOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.reqs = append(o.reqs, http.Request{Method: r.Method, Host: r.Host, URL: r.URL, Header: r.Header.Clone()})
	o.mu.Unlock()
	h := o.mux[r.URL.Path]
	if h == nil {
		http.NotFound(w, r)
		return
	}
	h(w, r)
}

// requests returns the requests seen since mark whose host and path satisfy keep.
func (o *siteOrigin) requests(mark int, keep func(host, path string) bool) []http.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []http.Request
	for _, r := range o.reqs[mark:] {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if keep(host, r.URL.Path) {
			out = append(out, r)
		}
	}
	return out
}

func (o *siteOrigin) mark() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.reqs)
}

// pool starts a pool on this origin with cfg's other fields (hops admitted with no
// interval, as in the service); it is closed when the test ends.
func (o *siteOrigin) pool(t testing.TB, cfg Config) hopsPool {
	t.Helper()
	return o.poolHops(t, cfg, true)
}

// poolHops is pool, with hops admitted (a pauser per tab, as the service has) or not
// (no pauser: nothing but the skipped resource types is paused).
func (o *siteOrigin) poolHops(t testing.TB, cfg Config, hops bool) hopsPool {
	t.Helper()
	return o.poolSeams(t, cfg, hops, seams{})
}

// poolSeams is poolHops with the test's seams, on the shared browser (sharedBrowser).
func (o *siteOrigin) poolSeams(t testing.TB, cfg Config, hops bool, sm seams) hopsPool {
	t.Helper()
	return o.poolOn(t, cfg, hops, onSharedBrowser(t, sm))
}

// poolOwnBrowser is pool on a browser of the pool's own, for a test that counts the
// browser's contexts or targets.
func (o *siteOrigin) poolOwnBrowser(t testing.TB, cfg Config) hopsPool {
	t.Helper()
	return o.poolOn(t, cfg, true, seams{})
}

func (o *siteOrigin) poolOn(t testing.TB, cfg Config, hops bool, sm seams) hopsPool {
	t.Helper()
	cfg.Guard = o.guard
	cfg.UserAgent = testUserAgent
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	var admitter HopAdmitter
	if hops {
		admitter = limiterHops{l: limiter.New(clock.Real{})}
	}
	p, err := newHopsPool(cfg, sm, admitter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// serveFile answers with a testdata file of the given content type.
func serveFile(name, contentType string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Write(testdata(name))
	}
}

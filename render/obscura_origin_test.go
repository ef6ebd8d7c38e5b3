package render

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
)

// exampleNames are the example origin's hosts: the test certificate of httptest is for
// *.example.com, so our own HTTPS requests can verify it against a test root.
var exampleNames = []string{"start", "hopa", "hopb", "selfnav", "cdn1", "cdn2", "cdn3", "media"}

// exampleOrigin is one handler behind a plain and a TLS listener, reached as
// <name>.example.com through --connect-to rules, that records every request with the hop
// admissions its host had been granted when it arrived.
type exampleOrigin struct {
	plain, tls *httptest.Server
	guard      *netguard.Guard
	roots      *x509.CertPool
	pages      http.HandlerFunc

	mu       sync.Mutex
	hits     []exampleHit
	admitted map[string]int // host → hop admissions granted so far
}

type exampleHit struct {
	host, path, cookie string
	remote             string // the connection it came on
	isTLS              bool
	admittedCount      int // the host's hop admissions granted before the request arrived
}

func newExampleOrigin(t *testing.T, pages http.HandlerFunc) *exampleOrigin {
	t.Helper()
	f := getFixture(t)
	o := &exampleOrigin{pages: pages, admitted: map[string]int{}}
	o.plain = httptest.NewServer(http.HandlerFunc(o.serve))
	o.tls = httptest.NewUnstartedServer(http.HandlerFunc(o.serve))
	// The browser's handshakes end with an unknown-certificate alert before it proceeds.
	o.tls.Config.ErrorLog = log.New(io.Discard, "", 0)
	o.tls.StartTLS()
	t.Cleanup(o.plain.Close)
	t.Cleanup(o.tls.Close)
	o.roots = x509.NewCertPool()
	o.roots.AddCert(o.tls.Certificate())
	_, plainPort, _ := net.SplitHostPort(o.plain.Listener.Addr().String())
	_, tlsPort, _ := net.SplitHostPort(o.tls.Listener.Addr().String())
	var rules []netguard.Rule
	for _, n := range exampleNames {
		rules = append(rules, mustRule(n+".example.com:80:127.0.0.1:"+plainPort), mustRule(n+".example.com:443:127.0.0.1:"+tlsPort))
	}
	o.guard = netguard.New(netguard.Config{ConnectTo: rules, Resolver: fakeResolver{}, Dialer: loopbackOnly{f}})
	return o
}

func (o *exampleOrigin) serve(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	o.mu.Lock()
	o.hits = append(o.hits, exampleHit{host: host, path: r.URL.Path, remote: r.RemoteAddr, cookie: r.Header.Get("Cookie"), isTLS: r.TLS != nil, admittedCount: o.admitted[host]})
	o.mu.Unlock()
	o.pages(w, r)
}

// requests returns the requests the origin saw for host.
func (o *exampleOrigin) requests(host string) []exampleHit {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []exampleHit
	for _, h := range o.hits {
		if h.host == host {
			out = append(out, h)
		}
	}
	return out
}

// AdmitHop is the limiter's, recording each admission granted.
func (o *exampleOrigin) hopAdmitter() HopAdmitter {
	return &recordingHops{o: o, hops: limiterHops{l: limiter.New(clock.Real{})}}
}

type recordingHops struct {
	o    *exampleOrigin
	hops limiterHops
}

func (h *recordingHops) AdmitHop(ctx context.Context, domain string) (limiter.Admission, error) {
	adm, err := h.hops.AdmitHop(ctx, domain)
	if err == nil {
		h.o.mu.Lock()
		h.o.admitted[domain]++
		h.o.mu.Unlock()
	}
	return adm, err
}

func (o *exampleOrigin) admittedCount(host string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.admitted[host]
}

// newExamplePool is a pool on the relay whose server's own proxy is our guard proxy, in
// front of a Chromium that takes the test certificate, with the example origin's guard.
func newExamplePool(t *testing.T, o *exampleOrigin, edit func(*Config)) (hopsPool, *obscuraRelay) {
	t.Helper()
	return newExamplePoolFlags(t, o, []string{"--ignore-certificate-errors"}, edit)
}

// newExamplePoolFlags is newExamplePool with the Chromium's certificate flags given.
func newExamplePoolFlags(t *testing.T, o *exampleOrigin, certFlags []string, edit func(*Config)) (hopsPool, *obscuraRelay) {
	t.Helper()
	ln := listenLoopback(t)
	relay := newObscuraRelay(t, startDebugBrowser(t, "relay-browser-", append([]string{"--remote-allow-origins=*",
		"--proxy-server=http://" + ln.Addr().String(), "--proxy-bypass-list=<-loopback>"}, certFlags...)...))
	cfg := Config{
		Endpoint:    relay.url(),
		Concurrency: 1,
		QueueLength: 2,
		UserAgent:   testUserAgent,
		Guard:       o.guard,
		Logger:      testLogger(t),
	}
	if edit != nil {
		edit(&cfg)
	}
	p, err := newHopsPool(cfg, seams{guardProxyLn: ln, chainTLS: &tls.Config{RootCAs: o.roots}}, o.hopAdmitter())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, relay
}

// htmlPage writes an HTML page.
func htmlPage(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	io.WriteString(w, "<!doctype html><html><head><title>t</title></head><body>"+body+"</body></html>")
}

func hostOf(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		h = r.Host
	}
	return strings.TrimSuffix(h, ".example.com")
}

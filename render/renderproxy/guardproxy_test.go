package renderproxy

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestGuardProxyRoute: a request goes to the render of its host's domain, else of its
// Referer's, else to the oldest render; with no render in flight it is refused at once,
// without a dial, and counted.
func TestGuardProxyRoute(t *testing.T) {
	g := NewGuard(listenLoopback(t), slog.New(slog.DiscardHandler))
	defer g.Close()
	a := &Proxy{st: renderOf("a.test")}
	b := &Proxy{st: renderOf("b.test")}

	req := func(method, target, referer string) *http.Request {
		r := httptest.NewRequest(method, target, nil)
		if referer != "" {
			r.Header.Set("Referer", referer)
		}
		return r
	}
	if px := g.route(req("GET", "http://a.test/", "")); px != nil {
		t.Fatalf("routed with no render in flight")
	}
	w := httptest.NewRecorder()
	g.ServeHTTP(w, req("GET", "http://a.test/", ""))
	if w.Code != http.StatusForbidden || g.refusedCount.Load() != 1 {
		t.Errorf("no render: status %d refused_count %d, want 403 and 1", w.Code, g.refusedCount.Load())
	}

	warm := &Proxy{} // a warm tab's, no render yet: it owns nothing
	detachWarm := g.Attach(warm)
	defer detachWarm()
	detachA := g.Attach(a)
	detachB := g.Attach(b)
	tests := []struct {
		name string
		r    *http.Request
		want *Proxy
	}{
		{"own host", req("GET", "http://b.test/x", ""), b},
		{"own host, CONNECT", req("CONNECT", "b.test:443", ""), b},
		{"own host, other case and port", req("GET", "http://B.test:8080/", ""), b},
		{"third host by referer", req("GET", "http://cdn.test/app.js", "http://b.test/page"), b},
		{"third host over CONNECT: the oldest", req("CONNECT", "cdn.test:443", ""), a},
	}
	for _, tt := range tests {
		if got := g.route(tt.r); got != tt.want {
			t.Errorf("%s: routed to %p, want %p", tt.name, got, tt.want)
		}
	}
	detachA()
	detachA() // twice is harmless
	if got := g.route(req("CONNECT", "a.test:443", "")); got != b {
		t.Errorf("after a's detach: routed to %p, want b", got)
	}
	detachB()
	if got := g.route(req("GET", "http://b.test/", "")); got != nil {
		t.Errorf("after both detached: routed to %p", got)
	}
}

// domainRender is a render as the guard proxy's routing sees it: its domain alone (the
// route asks nothing else).
type domainRender struct {
	Render
	domain string
}

func (r domainRender) Domain() string { return r.domain }

func renderOf(domain string) Render { return domainRender{domain: domain} }

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

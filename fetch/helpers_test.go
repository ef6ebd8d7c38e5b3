package fetch

import (
	"context"
	"downloader/internal/testkit"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// origin is a real HTTP server on 127.0.0.1 serving many virtual hosts; tests reach it
// through connect-to rules. It counts accepted connections and records requests.
type origin struct {
	srv     *httptest.Server
	port    string
	accepts atomic.Int64

	mu       sync.Mutex
	requests []string // "host/path" in arrival order
}

func newOrigin(t testing.TB, h http.HandlerFunc) *origin {
	return startOrigin(t, h, false)
}

func newTLSOrigin(t testing.TB, h http.HandlerFunc) *origin {
	return startOrigin(t, h, true)
}

func startOrigin(t testing.TB, h http.HandlerFunc, useTLS bool) *origin {
	t.Helper()
	o := &origin{}
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.requests = append(o.requests, hostOf(r)+r.URL.Path)
		o.mu.Unlock()
		h(w, r)
	}))
	o.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			o.accepts.Add(1)
		}
	}
	o.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake errors are the point of some tests
	if useTLS {
		o.srv.StartTLS()
	} else {
		o.srv.Start()
	}
	t.Cleanup(o.srv.Close)
	_, o.port, _ = net.SplitHostPort(o.srv.Listener.Addr().String())
	return o
}

// hostOf returns the request's Host without its port.
func hostOf(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		return h
	}
	return r.Host
}

func (o *origin) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.requests...)
}

// blackholeAddr is a public address the fake resolver hands out; the test dialer never
// really dials it but blocks until the dial's context ends, like a black-holed SYN.
const blackholeAddr = "93.184.215.14"

// checkDialer dials loopback for real. A dial to blackholeAddr blocks until ctx ends and
// fails with a dial timeout, without any packet. Any other address fails the test: the
// guard must never let it through. onWrite, when set, is told of every write to a
// loopback connection before it happens: the moment bytes go on the wire.
type checkDialer struct {
	t       testing.TB
	onWrite func(c net.Conn)
}

func (d *checkDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		d.t.Errorf("dial of a bad address %q", address)
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
		var nd net.Dialer
		c, err := nd.DialContext(ctx, network, address)
		if err != nil || d.onWrite == nil {
			return c, err
		}
		return &writeWatchConn{Conn: c, onWrite: d.onWrite}, nil
	}
	if host == blackholeAddr {
		<-ctx.Done()
		return nil, &net.OpError{Op: "dial", Net: network, Err: timeoutErr{}}
	}
	d.t.Errorf("the guard let through a dial to %s %s", network, address)
	return nil, errors.New("test dialer: refused " + address)
}

// writeWatchConn tells onWrite of each write before passing it on.
type writeWatchConn struct {
	net.Conn
	onWrite func(c net.Conn)
}

func (c *writeWatchConn) Write(p []byte) (int, error) {
	c.onWrite(c.Conn)
	return c.Conn.Write(p)
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// hopRecorder is a HopAdmitter that admits every hop (interval 0) from a real limiter and
// records the domains, or fails with err when set.
type hopRecorder struct {
	l   *limiter.Limiter
	err error

	mu      sync.Mutex
	domains []string
}

func (h *hopRecorder) AdmitHop(ctx context.Context, domain string) (limiter.Admission, error) {
	h.mu.Lock()
	h.domains = append(h.domains, domain)
	h.mu.Unlock()
	if h.err != nil {
		return limiter.Admission{}, h.err
	}
	return h.l.Wait(ctx, domain, 0, downloader.IntervalSourceRequest, downloader.EntryProbe)
}

func (h *hopRecorder) admitted() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.domains...)
}

// env is one fetcher wired to an origin through a guard.
type env struct {
	t      testing.TB
	origin *origin
	l      *limiter.Limiter
	hops   *hopRecorder
	f      *Fetcher
}

type envOption func(*Config, *netguard.Config)

func newEnv(t testing.TB, o *origin, opts ...envOption) *env {
	t.Helper()
	l := limiter.New(clock.Real{})
	hops := &hopRecorder{l: l}
	gcfg := netguard.Config{
		Resolver: &testkit.Resolver{
			Answers: map[string][]netip.Addr{
				"evil.example":      {netip.MustParseAddr("127.0.0.1")},
				"meta.example":      {netip.MustParseAddr("169.254.169.254")},
				"blackhole.example": {netip.MustParseAddr(blackholeAddr)},
			},
			Errs: map[string]error{
				"servfail.example": &net.DNSError{Err: "server misbehaving", Name: "servfail.example", IsTemporary: true},
				"dnstimeout.example": &net.DNSError{Err: "i/o timeout", Name: "dnstimeout.example",
					IsTimeout: true, IsTemporary: true},
			},
		},
		Dialer: &checkDialer{t: t},
	}
	cfg := Config{}
	for _, opt := range opts {
		opt(&cfg, &gcfg)
	}
	if o != nil {
		// After the options' rules: the first match wins, this one is the catch-all.
		r, err := netguard.ParseConnectTo("*.test::127.0.0.1:" + o.port)
		if err != nil {
			t.Fatal(err)
		}
		gcfg.ConnectTo = append(gcfg.ConnectTo, r)
	}
	cfg.Guard = netguard.New(gcfg)
	f := New(cfg)
	t.Cleanup(f.Close)
	return &env{t: t, origin: o, l: l, hops: hops, f: f}
}

func withRule(spec string) envOption {
	return func(_ *Config, g *netguard.Config) {
		r, err := netguard.ParseConnectTo(spec)
		if err != nil {
			panic(err)
		}
		g.ConnectTo = append(g.ConnectTo, r)
	}
}

// withWriteWatch has the test dialer tell f of every write on a connection it dialed.
func withWriteWatch(f func(c net.Conn)) envOption {
	return func(_ *Config, g *netguard.Config) { g.Dialer.(*checkDialer).onWrite = f }
}

func withConfig(fn func(*Config)) envOption {
	return func(c *Config, _ *netguard.Config) { fn(c) }
}

// fetch takes the first request's admission as a caller would, fetches, and finishes it.
func (e *env) fetch(ctx context.Context, raw string) *downloader.Outcome {
	e.t.Helper()
	return e.fetchWith(ctx, raw, e.f.Fetch)
}

// fetchOpts is fetch with the request's options (FetchWith).
func (e *env) fetchOpts(ctx context.Context, raw string, opts downloader.FetchOptions) *downloader.Outcome {
	e.t.Helper()
	return e.fetchWith(ctx, raw, func(ctx context.Context, u *url.URL, adm *limiter.Admission, hops HopAdmitter) *downloader.Outcome {
		return e.f.FetchWith(ctx, u, adm, hops, opts)
	})
}

// admitter is the hop admitter the env's fetches pass: its recorder, or none (nil) once
// a test dropped it.
func (e *env) admitter() HopAdmitter {
	if e.hops == nil {
		return nil
	}
	return e.hops
}

// fetchWith is fetch through do (Fetch or FetchOnce).
func (e *env) fetchWith(ctx context.Context, raw string, do func(context.Context, *url.URL, *limiter.Admission, HopAdmitter) *downloader.Outcome) *downloader.Outcome {
	e.t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		e.t.Fatal(err)
	}
	domain, err := downloader.CanonicalHost(u.Hostname())
	if err != nil {
		e.t.Fatal(err)
	}
	// Wait, not Allow: concurrent fetches (the parallel benchmark) may see another's wire
	// moment a hair after their own clock reading, which Allow refuses even at interval 0.
	adm, err := e.l.Wait(context.Background(), domain, 0, downloader.IntervalSourceRequest, downloader.EntryProbe)
	if err != nil {
		e.t.Fatalf("no admission for %s: %v", domain, err)
	}
	out := do(ctx, u, &adm, e.admitter())
	adm.Cancel()
	return out
}

// releaseAtEnd closes ch, which handlers wait on, when the test ends. Call it after the
// origin is started, so it runs before the server's Close (which waits for handlers).
func releaseAtEnd(t testing.TB, ch chan struct{}) {
	t.Cleanup(func() { close(ch) })
}

// deadline returns a context that ends after d of real time.
func deadline(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

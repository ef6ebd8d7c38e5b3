package render

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
)

// proxyErrorHeader marks an answer that our proxy made up itself (the origin could not be
// reached or was refused): "<token> <fail_reason>". The token is new for every tab, so an
// origin cannot forge the mark.
const proxyErrorHeader = "X-Downloader-Proxy-Error"

// errNotArmed refuses requests of a tab that is not rendering (there should be none).
var errNotArmed = errors.New("render proxy: no render in progress")

// proxy is one tab's HTTP forward proxy: plain HTTP is forwarded, CONNECT (HTTPS, WSS) is
// tunnelled; every connection to an origin is dialled through the Guard. It serves one
// render, which it learns with arm. Safe for concurrent use.
type proxy struct {
	dialGuard func(ctx context.Context, network, address string) (net.Conn, error)
	log       *slog.Logger
	token     string
	ln        net.Listener
	srv       *http.Server
	rp        *httputil.ReverseProxy
	transport *http.Transport
	ctx       context.Context
	cancel    context.CancelFunc
	originTLS *tls.Config // our TLS client's to origins (terminated requests); nil: the system's roots

	mu      sync.Mutex
	st      *renderState
	closed  bool
	tunnels map[net.Conn]struct{}
	wg      sync.WaitGroup // handlers, tunnels and the server
}

// newProxy makes a render's proxy; with listen, on a listener of its own (else it serves
// only the connections handed to it: a relay's, the guard proxy's requests).
func (p *Pool) newProxy(listen bool) (*proxy, error) {
	var ln net.Listener
	if listen {
		var err error
		if ln, err = net.Listen("tcp", net.JoinHostPort(p.cfg.ProxyHost, "0")); err != nil {
			return nil, fmt.Errorf("render proxy: listen: %w", err)
		}
	}
	var tok [12]byte
	rand.Read(tok[:])
	x := &proxy{
		dialGuard: p.cfg.Guard.DialContext,
		log:       p.log,
		token:     hex.EncodeToString(tok[:]),
		ln:        ln,
		tunnels:   make(map[net.Conn]struct{}),
		originTLS: p.cfg.chainTLS,
	}
	x.ctx, x.cancel = context.WithCancel(p.ctx)
	x.transport = &http.Transport{
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			return x.dial(ctx, network, address, false)
		},
		// An https:// request is one the guard proxy read inside a CONNECT it terminated.
		DialTLSContext:      x.dialOriginTLS,
		Proxy:               nil,
		DisableCompression:  true, // pass the browser's Accept-Encoding and the body through as they are
		MaxIdleConnsPerHost: 6,
		IdleConnTimeout:     30 * time.Second,
	}
	x.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The request line is absolute; send it on as it came. Rewrite strips
			// X-Forwarded-* and Forwarded, and the hop-by-hop headers are removed.
			pr.Out.Host = pr.In.Host
			// The one host (SPEC §2): Chromium writes a host the WHATWG way, which is
			// the canonical one but for a trailing dot; the request goes out with the
			// canonical host, the key its admission was found under.
			if c, _, err := downloader.CanonicalizeURL(pr.Out.URL); err == nil {
				pr.Out.URL, pr.Out.Host = c, c.Host
			}
		},
		Transport:     x.transport,
		FlushInterval: -1,
		ErrorHandler:  x.fail,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	x.srv = &http.Server{
		Handler:           x,
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return x.ctx },
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	if ln != nil {
		x.wg.Go(func() { x.srv.Serve(ln) })
	}
	return x, nil
}

// addr is the proxy's own listening address; "" for one without a listener.
func (x *proxy) addr() string {
	if x.ln == nil {
		return ""
	}
	return x.ln.Addr().String()
}

// arm makes the proxy serve the render st.
func (x *proxy) arm(st *renderState) {
	x.mu.Lock()
	x.st = st
	x.mu.Unlock()
}

func (x *proxy) state() *renderState {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.st
}

// close stops the server, ends every request and tunnel, and waits for them.
func (x *proxy) close() {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return
	}
	x.closed = true
	for c := range x.tunnels {
		c.Close()
	}
	x.mu.Unlock()
	x.cancel()
	x.srv.Close()
	x.wg.Wait()
	x.transport.CloseIdleConnections()
}

// track registers c to be closed by close; false if the proxy is already closed.
func (x *proxy) track(c net.Conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false
	}
	x.tunnels[c] = struct{}{}
	return true
}

func (x *proxy) untrack(c net.Conn) {
	x.mu.Lock()
	delete(x.tunnels, c)
	x.mu.Unlock()
	c.Close()
}

// enter counts a handler in, unless the proxy is closing.
func (x *proxy) enter() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false
	}
	x.wg.Add(1)
	return true
}

func (x *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !x.enter() {
		http.Error(w, "closing", http.StatusServiceUnavailable)
		return
	}
	defer x.wg.Done()
	st := x.state()
	if st == nil {
		x.fail(w, r, errNotArmed)
		return
	}
	st.sawRequest()
	if r.Method == http.MethodConnect {
		// Every tunnel is at least one request, under the render's caps (SPEC §3;
		// tunnelcaps.go). A refusal is an error status to the CONNECT, which the browser
		// reports as net::ERR_TUNNEL_CONNECTION_FAILED; nothing is dialled.
		if d, err := downloader.CanonicalHost(r.Host); err == nil && !st.admitTunnel(d) {
			x.log.Debug("render tunnel over the render's cap, refused", "domain", d)
			w.Header().Set(proxyErrorHeader, x.token+" "+string(downloader.FailSelfRateLimited))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		x.connect(w, r, st)
		return
	}
	// https:// only as the guard proxy hands it over, read inside a CONNECT it terminated
	// (r.TLS set); a client cannot send one in plain text.
	if !r.URL.IsAbs() || (r.URL.Scheme != "http" && (r.URL.Scheme != "https" || r.TLS == nil)) {
		http.Error(w, "render proxy: only absolute http:// requests and CONNECT", http.StatusBadRequest)
		return
	}
	if x.isChainRequest(r) {
		x.rp.ServeHTTP(w, r) // resolveChain's, admitted by it: a main document
		return
	}
	if h := st.proxyHops(); h != nil && isDocumentRequest(r) {
		if !h.admit(r) {
			// Our own limiter's refusal, as the tracker reads it from the mark.
			w.Header().Set(proxyErrorHeader, x.token+" "+string(downloader.FailSelfRateLimited))
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		x.rp.ServeHTTP(w, r) // a main document: not one of the page's sub-requests
		return
	}
	if st.skipsRequest(r) {
		// A type the render skips (no pauser to fail it in the browser): never sent.
		w.Header().Set(proxyErrorHeader, x.token+" "+string(downloader.FailDestinationForbidden))
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if isSpeculativeRequest(r) {
		// A prefetch the pauser did not see (a plain-http subresource prefetch: Chromium's
		// Fetch filter takes no Prefetch type): a load of a page nobody asked for, sent
		// nowhere, as the pauser fails the ones it sees (hops.go, isSpeculative).
		x.log.Debug("render prefetch refused", "host", r.URL.Host)
		w.Header().Set(proxyErrorHeader, x.token+" "+string(downloader.FailSelfRateLimited))
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if st.proxyCounts(r) {
		if d, err := downloader.CanonicalHost(r.URL.Host); err == nil && !st.admitSubrequest(d) {
			x.log.Debug("render sub-request over the render's cap, refused", "domain", d)
			// Our own limit, as the tracker reads it from the mark.
			w.Header().Set(proxyErrorHeader, x.token+" "+string(downloader.FailSelfRateLimited))
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
	}
	x.rp.ServeHTTP(w, r)
}

// isSpeculativeRequest reports whether a plain-http request is a speculative load, by the
// header the browser marks prefetches with (Sec-Purpose, or the older Purpose).
func isSpeculativeRequest(r *http.Request) bool {
	for _, k := range []string{"Sec-Purpose", "Purpose"} {
		if strings.Contains(strings.ToLower(r.Header.Get(k)), "prefetch") {
			return true
		}
	}
	return false
}

// isMainDocument tells, without a pauser, a navigation of the page's own host (the main
// document, a same-host hop) from a sub-request, by the browser's fetch metadata.
func isMainDocument(r *http.Request, domain string) bool {
	if r.Header.Get("Sec-Fetch-Dest") != "document" {
		return false
	}
	d, err := downloader.CanonicalHost(r.URL.Host)
	return err == nil && d == domain
}

// dial connects to an origin through the Guard (tunnel: for a CONNECT). The connection
// holds the first request bytes to the page's own host, and those of each admitted hop,
// until the limiter lets them out (originConn).
func (x *proxy) dial(ctx context.Context, network, address string, tunnel bool) (net.Conn, error) {
	st := x.state()
	if st == nil {
		return nil, errNotArmed
	}
	if host, _, err := net.SplitHostPort(address); err == nil {
		if d, err := downloader.CanonicalHost(host); err == nil {
			ctx = netguard.WithConnectHook(ctx, &attemptHook{st: st, domain: d, stop: x.ctx.Done()})
		}
	}
	conn, err := x.dialGuard(ctx, network, address)
	if err != nil {
		var fe *netguard.ForbiddenError
		if errors.As(err, &fe) {
			st.countBlocked()
			x.log.Info("render sub-request refused", "address", address, "reason", fe.Reason)
		}
		return nil, err
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return conn, nil
	}
	d, err := downloader.CanonicalHost(host)
	if err != nil {
		return conn, nil
	}
	oc := &originConn{Conn: conn, st: st, domain: d, stop: x.ctx.Done()}
	if tunnel {
		oc.records = &recordScanner{}
	}
	return oc, nil
}

// proxyFailureCause is the cause of a request our proxy could not forward: a TLS handshake
// of ours with the origin that failed (a terminated request's) is tls_failed, the rest is
// what the dial's error tells (errorCause).
func proxyFailureCause(err error) downloader.Cause {
	if errors.Is(err, errOriginTLS) {
		return downloader.CauseTLSFailed
	}
	return errorCause(err)
}

// fail answers a request the proxy could not forward, with our mark and the cause
// (proxyMark).
func (x *proxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	c := proxyFailureCause(err)
	if st := x.state(); st != nil && r.TLS != nil && r.URL.Scheme == "https" {
		// A terminated request: kept by host:port as a failed tunnel's is.
		st.recordTunnelFailure(hostPort(r.URL.String()), c)
	}
	status := http.StatusBadGateway
	if c == downloader.CauseDestinationForbidden {
		status = http.StatusForbidden
	}
	w.Header().Set(proxyErrorHeader, proxyMark(x.token, c))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
}

// connect tunnels a CONNECT request. A refused or failed dial is answered with an error
// status, which the browser reports as net::ERR_TUNNEL_CONNECTION_FAILED; the reason is
// kept for the render by host:port.
func (x *proxy) connect(w http.ResponseWriter, r *http.Request, st *renderState) {
	up, err := x.dial(r.Context(), "tcp", r.Host, true)
	if err != nil {
		st.recordTunnelFailure(r.Host, proxyFailureCause(err))
		x.fail(w, r, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "render proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !x.track(up) {
		up.Close()
		down.Close()
		return
	}
	if !x.track(down) {
		x.untrack(up)
		down.Close()
		return
	}
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		x.untrack(up)
		x.untrack(down)
		return
	}
	// Bytes the browser sent right after its CONNECT may sit in the server's buffer.
	var fromClient io.Reader = down
	if n := brw.Reader.Buffered(); n > 0 {
		buffered, _ := brw.Reader.Peek(n)
		fromClient = io.MultiReader(strings.NewReader(string(buffered)), down)
	}
	x.wg.Add(1) // the handler's own count keeps the group above zero here
	go func() {
		defer x.wg.Done()
		io.Copy(up, fromClient)
		x.untrack(up)
		x.untrack(down)
	}()
	io.Copy(down, up)
	x.untrack(up)
	x.untrack(down)
}

// renderState is what a render shares with its proxy and its pauser. Safe for concurrent
// use.
type renderState struct {
	clk    clock.Clock
	domain string        // the page's normalised host
	over   chan struct{} // closed by release

	mu             sync.Mutex
	adm            *limiter.Admission // nil: no limiter (or released)
	released       bool               // Render returned: adm is the caller's again
	first          *limiter.WireGate  // adm's passage to the wire: the first request to domain (wire.go)
	seen           bool               // the proxy saw at least one request
	blocked        int
	tunnelFailures map[string]downloader.Cause
	hops           []*hopAdmission // the render's own admissions of main document hops
	refused        bool            // a hop was not admitted in time
	unwiredHops    atomic.Int32    // hops admitted and not yet on the wire

	caps               subrequestCaps
	pausedCount        bool           // the tab's pauser counts the https sub-requests, the proxy the plain-http ones it was not told of
	decided            map[string]int // plain-http URLs the pauser let through, not yet seen by the proxy
	atProxy            *proxyHops     // the proxy admits the main document hops (interceptProxy)
	tunnelCredits      map[string]int // https requests the pauser let go on, per host, whose tunnel is counted already (tunnelcaps.go)
	tunnelSubCount     int            // tunnels counted as sub-requests of their own, with a pauser
	tunnelRefusedCount int            // of them, refused at a cap
	subCount           int            // sub-requests let through
	subByHost          map[string]int // of them, per host other than the page's
	capped             int            // sub-requests refused at a cap
	chainRedirects     int            // redirects resolveChain followed (interceptProxy)
	proxySkip          skipSet        // the types refused at the proxy (interceptProxy)
	proxySkipped       int            // of them, requests refused
	popups             int            // windows the page tried to open
	skippedFrames      int            // cross-host iframe documents not admitted now
}

// subrequestCaps bound the sub-requests of one render (SPEC §3): they go out under the
// render's one admission, so without a bound a page could turn a render into a flood of
// its own host or of any other. Zero means no bound.
type subrequestCaps struct {
	total   int // per render
	perHost int // per render and host other than the page's own
}

func newRenderState(clk clock.Clock, domain string, adm *limiter.Admission) *renderState {
	return &renderState{clk: clk, domain: domain, adm: adm, first: limiter.NewWireGate(context.Background(), adm), over: make(chan struct{})}
}

// admitSubrequest counts one sub-request to domain (the page's own requests after its
// first main document: scripts, styles, XHR, fetch, beacons, same-host frames) and
// reports whether the caps let it go. A refused one is counted capped and never sent.
// The main documents and admitted hops are not sub-requests; "other host" is any host
// but the page's and its admitted hops'.
func (st *renderState) admitSubrequest(domain string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.admitSubrequestLocked(domain)
}

// admitSubrequestLocked is admitSubrequest with st.mu held.
func (st *renderState) admitSubrequestLocked(domain string) bool {
	if st.caps.total > 0 && st.subCount >= st.caps.total {
		st.capped++
		return false
	}
	if st.caps.perHost > 0 && !st.ownDomain(domain) {
		if st.subByHost[domain] >= st.caps.perHost {
			st.capped++
			return false
		}
		if st.subByHost == nil {
			st.subByHost = make(map[string]int)
		}
		st.subByHost[domain]++
	}
	st.subCount++
	return true
}

// ownDomain reports whether domain is the page's or one of its admitted hops'. Requires
// st.mu held.
func (st *renderState) ownDomain(domain string) bool {
	if domain == st.domain {
		return true
	}
	for _, h := range st.hops {
		if h.domain == domain {
			return true
		}
	}
	return false
}

func (st *renderState) countPopup() {
	st.mu.Lock()
	st.popups++
	st.mu.Unlock()
}

func (st *renderState) countSkippedFrame() {
	st.mu.Lock()
	st.skippedFrames++
	st.mu.Unlock()
}

// guardCounts are the health signal's counts of what the render's guards kept from
// other sites.
type guardCounts struct {
	popups, skippedFrames, capped int
}

func (st *renderState) guardCounts() guardCounts {
	st.mu.Lock()
	defer st.mu.Unlock()
	return guardCounts{popups: st.popups, skippedFrames: st.skippedFrames, capped: st.capped}
}

// fill sets the health signal's guard counts.
func (c guardCounts) fill(hs *downloader.HealthSignal) {
	hs.PopupCount, hs.SkippedFrameCount, hs.CappedSubrequestCount = &c.popups, &c.skippedFrames, &c.capped
}

// countsAtPauser makes the tab's pauser count the sub-requests it sees (every https://
// request of the page's frames, where the proxy sees only a tunnel) and tell the proxy
// which plain http:// requests it let through (documents): the proxy counts the others.
func (st *renderState) countsAtPauser() {
	st.mu.Lock()
	st.pausedCount = true
	st.mu.Unlock()
}

// markDecided records that the pauser let the plain http:// request u go on (a document,
// or a same-host iframe it counted itself): not one for the proxy to count.
func (st *renderState) markDecided(u string) {
	st.mu.Lock()
	if st.decided == nil {
		st.decided = make(map[string]int)
	}
	st.decided[u]++
	st.mu.Unlock()
}

// proxyCounts reports whether the proxy counts the plain http:// request r under the
// render's caps: with a pauser, every one it did not let through itself (the pauser does
// not pause plain-http sub-requests); without one, every one but a navigation of the
// page's own host. A document the pauser let through whose request never came leaves a
// mark that one later request to the same URL uses up: at most one uncounted request per
// document the pauser admitted or counted.
func (st *renderState) proxyCounts(r *http.Request) bool {
	st.mu.Lock()
	paused := st.pausedCount
	if paused {
		u := r.URL.String()
		if n := st.decided[u]; n > 0 {
			if n == 1 {
				delete(st.decided, u)
			} else {
				st.decided[u] = n - 1
			}
			st.mu.Unlock()
			return false
		}
	}
	st.mu.Unlock()
	return paused || !isMainDocument(r, st.domain)
}

var errReleased = errors.New("render proxy: render over")

// release hands the admission back to Render's caller: the proxy no longer touches it.
// The render's own hop admissions are given back (Cancel, or Done once on the wire).
func (st *renderState) release() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.released {
		return
	}
	st.released = true
	close(st.over)
	st.releaseHops()
}

func (st *renderState) sawRequest() {
	st.mu.Lock()
	st.seen = true
	st.mu.Unlock()
}

func (st *renderState) countBlocked() {
	st.mu.Lock()
	st.blocked++
	st.mu.Unlock()
}

func (st *renderState) recordTunnelFailure(hostport string, c downloader.Cause) {
	st.mu.Lock()
	if st.tunnelFailures == nil {
		st.tunnelFailures = make(map[string]downloader.Cause)
	}
	st.tunnelFailures[hostport] = c
	st.mu.Unlock()
}

func (st *renderState) snapshot() (seen bool, blocked int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.seen, st.blocked
}

// tunnelFailure is the cause our proxy recorded for a request to hostport it could not
// make, CauseReported (none) when it recorded none.
func (st *renderState) tunnelFailure(hostport string) downloader.Cause {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.tunnelFailures[hostport]
}

// Package renderproxy is the guard of every connection a render's browser opens: the
// per-render HTTP forward proxy every request and tunnel of a tab passes (Proxy), the one
// long-lived guard proxy for a CDP server with no proxy per browser context, Obscura's
// `serve --proxy` (Guard), with its canary and its TLS termination under a CA of our own
// (Authority). It forwards, tunnels and terminates; every decision of the render's own
// (admission, caps, skipped types, the SSRF guard and the wire moment on each dial) it
// asks the render it serves through Render (package render's renderState). SPEC §3.
package renderproxy

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
	"time"

	"downloader"
)

// ErrorHeader marks an answer that our proxy made up itself (the origin could not be
// reached or was refused): "<token> <fail_reason>" (Mark). The token is new for every
// tab, so an origin cannot forge the mark.
const ErrorHeader = "X-Downloader-Proxy-Error"

// ErrNotArmed refuses requests of a tab that is not rendering (there should be none).
var ErrNotArmed = errors.New("render proxy: no render in progress")

// Render is the one render a Proxy serves, as the proxy asks it: package render's
// renderState behind an adapter. The proxy decides nothing of a render's own: it asks.
type Render interface {
	// Domain is the page's canonical host (SPEC §2).
	Domain() string
	// SawRequest notes that the proxy saw a request of the render.
	SawRequest()
	// AdmitTunnel decides on a CONNECT to domain under the render's caps (SPEC §3).
	AdmitTunnel(domain string) bool
	// AdmitDocument decides on r when the proxy admits the render's main document hops
	// and r is a document: isDocument false leaves r to the other rules.
	AdmitDocument(r *http.Request) (isDocument, ok bool)
	// SkipsRequest reports whether r is of a type the render skips (never sent).
	SkipsRequest(r *http.Request) bool
	// CountsRequest reports whether r goes under the render's sub-request caps here.
	CountsRequest(r *http.Request) bool
	// AdmitSubrequest counts one sub-request to domain; false: over a cap, refuse it.
	AdmitSubrequest(domain string) bool
	// RecordFailure keeps the cause of a request to hostport the proxy could not make.
	RecordFailure(hostport string, c downloader.Cause)
	// Dial connects to an origin for the render, through the SSRF guard and held at the
	// wire moment (SPEC §2); isTunnel: for a CONNECT (TLS records followed). stop is
	// closed when the proxy closes.
	Dial(ctx context.Context, stop <-chan struct{}, network, address string, isTunnel bool) (net.Conn, error)
}

// Config is what a Proxy is made with.
type Config struct {
	// ListenHost is the host of the proxy's own listener (with New's listen).
	ListenHost string
	Log        *slog.Logger
	// OriginTLS is our TLS client's configuration toward origins (terminated requests);
	// nil: the system's roots.
	OriginTLS *tls.Config
	// Cause is the cause of a request the proxy could not forward, from its error
	// (ErrOriginTLS among them), for the mark.
	Cause func(error) downloader.Cause
}

// Proxy is one tab's HTTP forward proxy: plain HTTP is forwarded, CONNECT (HTTPS, WSS) is
// tunnelled; every connection to an origin is dialled by its render (Render.Dial, through
// the Guard). It serves one render, which it learns with Arm. Safe for concurrent use.
type Proxy struct {
	log       *slog.Logger
	cause     func(error) downloader.Cause
	token     string
	ln        net.Listener
	srv       *http.Server
	rp        *httputil.ReverseProxy
	transport *http.Transport
	ctx       context.Context
	cancel    context.CancelFunc
	originTLS *tls.Config // our TLS client's to origins (terminated requests); nil: the system's roots

	mu      sync.Mutex
	st      Render
	closed  bool
	tunnels map[net.Conn]struct{}
	wg      sync.WaitGroup // handlers, tunnels and the server
}

// New makes a render's proxy, which lives until Close or ctx's end; with listen, on a
// listener of its own (else it serves only the connections handed to it: a relay's
// (Serve), the guard proxy's requests).
func New(ctx context.Context, cfg Config, listen bool) (*Proxy, error) {
	var ln net.Listener
	if listen {
		var err error
		if ln, err = net.Listen("tcp", net.JoinHostPort(cfg.ListenHost, "0")); err != nil {
			return nil, fmt.Errorf("render proxy: listen: %w", err)
		}
	}
	var tok [12]byte
	rand.Read(tok[:])
	x := &Proxy{
		log:       cfg.Log,
		cause:     cfg.Cause,
		token:     hex.EncodeToString(tok[:]),
		ln:        ln,
		tunnels:   make(map[net.Conn]struct{}),
		originTLS: cfg.OriginTLS,
	}
	x.ctx, x.cancel = context.WithCancel(ctx)
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

// Addr is the proxy's own listening address; "" for one without a listener.
func (x *Proxy) Addr() string {
	if x.ln == nil {
		return ""
	}
	return x.ln.Addr().String()
}

// Token is the proxy's secret of this tab: the first word of its marks (ErrorHeader) and
// the value of ChainHeader.
func (x *Proxy) Token() string { return x.token }

// Serve serves the connections l hands over until the proxy closes (Close closes l).
func (x *Proxy) Serve(l net.Listener) {
	x.wg.Go(func() { x.srv.Serve(l) })
}

// Arm makes the proxy serve the render st.
func (x *Proxy) Arm(st Render) {
	x.mu.Lock()
	x.st = st
	x.mu.Unlock()
}

func (x *Proxy) state() Render {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.st
}

// Close stops the server, ends every request and tunnel, and waits for them.
func (x *Proxy) Close() {
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
func (x *Proxy) track(c net.Conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false
	}
	x.tunnels[c] = struct{}{}
	return true
}

func (x *Proxy) untrack(c net.Conn) {
	x.mu.Lock()
	delete(x.tunnels, c)
	x.mu.Unlock()
	c.Close()
}

// enter counts a handler in, unless the proxy is closing.
func (x *Proxy) enter() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false
	}
	x.wg.Add(1)
	return true
}

func (x *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !x.enter() {
		http.Error(w, "closing", http.StatusServiceUnavailable)
		return
	}
	defer x.wg.Done()
	st := x.state()
	if st == nil {
		x.fail(w, r, ErrNotArmed)
		return
	}
	st.SawRequest()
	if r.Method == http.MethodConnect {
		// Every tunnel is at least one request, under the render's caps (SPEC §3;
		// render/tunnelcaps.go). A refusal is an error status to the CONNECT, which the browser
		// reports as net::ERR_TUNNEL_CONNECTION_FAILED; nothing is dialled.
		if d, err := downloader.CanonicalHost(r.Host); err == nil && !st.AdmitTunnel(d) {
			x.log.Debug("render tunnel over the render's cap, refused", "domain", d)
			w.Header().Set(ErrorHeader, x.token+" "+string(downloader.FailSelfRateLimited))
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
	if isDocument, ok := st.AdmitDocument(r); isDocument {
		if !ok {
			// Our own limiter's refusal, as the tracker reads it from the mark.
			w.Header().Set(ErrorHeader, x.token+" "+string(downloader.FailSelfRateLimited))
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		x.rp.ServeHTTP(w, r) // a main document: not one of the page's sub-requests
		return
	}
	if st.SkipsRequest(r) {
		// A type the render skips (no pauser to fail it in the browser): never sent.
		w.Header().Set(ErrorHeader, x.token+" "+string(downloader.FailDestinationForbidden))
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if isSpeculativeRequest(r) {
		// A prefetch the pauser did not see (a plain-http subresource prefetch: Chromium's
		// Fetch filter takes no Prefetch type): a load of a page nobody asked for, sent
		// nowhere, as the pauser fails the ones it sees (render/hops.go, isSpeculative).
		x.log.Debug("render prefetch refused", "host", r.URL.Host)
		w.Header().Set(ErrorHeader, x.token+" "+string(downloader.FailSelfRateLimited))
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if st.CountsRequest(r) {
		if d, err := downloader.CanonicalHost(r.URL.Host); err == nil && !st.AdmitSubrequest(d) {
			x.log.Debug("render sub-request over the render's cap, refused", "domain", d)
			// Our own limit, as the tracker reads it from the mark.
			w.Header().Set(ErrorHeader, x.token+" "+string(downloader.FailSelfRateLimited))
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

// dial connects to an origin for the armed render (isTunnel: for a CONNECT).
func (x *Proxy) dial(ctx context.Context, network, address string, isTunnel bool) (net.Conn, error) {
	st := x.state()
	if st == nil {
		return nil, ErrNotArmed
	}
	return st.Dial(ctx, x.ctx.Done(), network, address, isTunnel)
}

// fail answers a request the proxy could not forward, with our mark and the cause
// (proxyMark).
func (x *Proxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	c := x.cause(err)
	if st := x.state(); st != nil && r.TLS != nil && r.URL.Scheme == "https" {
		// A terminated request: kept by host:port as a failed tunnel's is.
		st.RecordFailure(HostPort(r.URL.String()), c)
	}
	status := http.StatusBadGateway
	if c == downloader.CauseDestinationForbidden {
		status = http.StatusForbidden
	}
	w.Header().Set(ErrorHeader, Mark(x.token, c))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
}

// connect tunnels a CONNECT request. A refused or failed dial is answered with an error
// status, which the browser reports as net::ERR_TUNNEL_CONNECTION_FAILED; the reason is
// kept for the render by host:port.
func (x *Proxy) connect(w http.ResponseWriter, r *http.Request, st Render) {
	up, err := x.dial(r.Context(), "tcp", r.Host, true)
	if err != nil {
		st.RecordFailure(r.Host, x.cause(err))
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

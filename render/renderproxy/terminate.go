package renderproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The guard proxy's TLS termination (authority.go): a CONNECT is answered by us, its
// connection handed, wrapped in our TLS, to one inner HTTP server of the guard proxy,
// which reads each request inside as an https:// one and routes it like a plain one.

// terminatedConn is a server's connection after our CONNECT answer, with the CONNECT's
// authority (host:port) it was for.
type terminatedConn struct {
	net.Conn
	authority string
}

// connQueue is the inner server's listener: its connections are the terminated CONNECTs.
type connQueue struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// push hands c to the inner server; false: it is closing (c is not taken).
func (q *connQueue) push(c net.Conn) bool {
	select {
	case q.conns <- c:
		return true
	case <-q.done:
		return false
	}
}

type authorityKey struct{}

// StartTermination makes g terminate every CONNECT under ca.
func (g *Guard) StartTermination(ca *Authority) {
	g.ca = ca
	g.innerLn = newConnQueue(g.ln.Addr())
	g.inner = &http.Server{
		Handler:           http.HandlerFunc(g.serveTerminated),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*tls.Conn); ok {
				if t, ok := tc.NetConn().(*terminatedConn); ok {
					return context.WithValue(ctx, authorityKey{}, t.authority)
				}
			}
			return ctx
		},
	}
	g.wg.Go(func() { g.inner.Serve(g.innerLn) })
}

// terminate answers a CONNECT itself and hands the connection, under our TLS, to the
// inner server. Nothing is dialled here: each request inside is.
func (g *Guard) terminate(w http.ResponseWriter, r *http.Request) {
	if _, _, err := net.SplitHostPort(r.Host); err != nil {
		http.Error(w, "render proxy: CONNECT needs host:port", http.StatusBadRequest)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "render proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		down.Close()
		return
	}
	var conn net.Conn = down
	if n := brw.Reader.Buffered(); n > 0 {
		buffered, _ := brw.Reader.Peek(n)
		conn = &prefixConn{Conn: down, r: io.MultiReader(strings.NewReader(string(buffered)), down)}
	}
	tc := tls.Server(&terminatedConn{Conn: conn, authority: r.Host}, g.ca.serverConfig(r.Host))
	if !g.innerLn.push(tc) {
		down.Close()
	}
}

// prefixConn reads what the server had buffered before the connection itself.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// serveTerminated handles one request read inside a terminated CONNECT: it becomes the
// absolute https:// request the server meant (a Host other than the CONNECT's is refused:
// we speak HTTP/1.1 only, so a browser never sends one), then goes where a plain request
// goes: the canary, else the proxy of the render it belongs to.
func (g *Guard) serveTerminated(w http.ResponseWriter, r *http.Request) {
	authority, _ := r.Context().Value(authorityKey{}).(string)
	host, port, err := net.SplitHostPort(authority)
	if err != nil || r.TLS == nil {
		http.Error(w, "render proxy: not a terminated CONNECT", http.StatusBadRequest)
		return
	}
	reqHost := r.Host
	if h, p, err := net.SplitHostPort(r.Host); err == nil {
		if p != port {
			reqHost = "" // another port than the CONNECT's
		} else {
			reqHost = h
		}
	}
	if !strings.EqualFold(reqHost, host) || r.URL.IsAbs() {
		http.Error(w, "render proxy: the request's host is not its CONNECT's", http.StatusMisdirectedRequest)
		return
	}
	r.URL.Scheme = "https"
	r.URL.Host = authority
	if port == "443" {
		r.URL.Host = host
	}
	r.Host = r.URL.Host
	g.serve(w, r)
}

// ErrOriginTLS marks a failed TLS handshake of ours with an origin (tls_failed).
var ErrOriginTLS = errors.New("render proxy: TLS with the origin")

// dialOriginTLS is our TLS client to an origin, for a terminated request: the connection
// is dialled as a tunnel's (the Guard, --connect-to, the wire gate following the TLS
// records), and the origin's certificate verified as any client would (the system's
// roots, or originTLS's).
func (x *Proxy) dialOriginTLS(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := x.dial(ctx, network, address, true)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		c.Close()
		return nil, err
	}
	cfg := &tls.Config{}
	if x.originTLS != nil {
		cfg = x.originTLS.Clone()
	}
	cfg.ServerName = host
	cfg.NextProtos = []string{"http/1.1"}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		if IsTLSError(err) {
			return nil, errors.Join(ErrOriginTLS, err)
		}
		return nil, err
	}
	return tc, nil
}

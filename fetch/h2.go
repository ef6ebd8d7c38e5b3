//lint:file-ignore SA1019 x/net/http2's Transport and ClientConn are deprecated for net/http's own (Go 1.26); moving the per-stream gate (SPEC §2) onto net/http.ClientConn is a change of its own, to be measured, not a lint fix.

package fetch

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// HTTP/2 to origins (SPEC §5, on the real web; SPEC §2, every write of a request is a
// request of its own).
//
// The transport offers ALPN h2 and http/1.1 on every TLS connection it dials (through the
// guard, as before). When the origin picks h2, net/http hands the connection to
// TLSNextProto["h2"], which makes it an x/net ClientConn wrapped in h2Conn; net/http then
// keeps that connection in its pool and shares it among requests to the same host and
// port, each one a stream. Plain http:// stays HTTP/1.1 (no h2c: origins do not offer it
// to clients that have not asked).
//
// Each stream is a request: its HEADERS frame is its wire moment. h2Conn.RoundTrip waits
// for the hop's wire gate (WireGate.Sending: one first write per admission, spaced from
// the domain's last request) before the stream is opened, holds the domain until the
// frame is written (httptrace's WroteHeaders: Wrote), and only then lets the connection's
// writer have it. A ClientConn's RoundTrip never sends a request twice: x/net's retries
// (REFUSED_STREAM, a GOAWAY that the stream was above, a connection lost before the
// answer) live in its Transport's pool, which is not used here. net/http's own loop
// retries an HTTP/2 request only on a "no cached connection" answer, which h2Conn gives
// only before anything of the request was written (the connection can take no new
// stream): the retry then is the request's first write, on another connection, through
// the same gate. When the request's own dial is under way (net/http handed it a pooled
// connection meanwhile), it does not ask again, which would be a second connection
// attempt: it waits for its own connection and opens the stream there (owndial.go). Any
// other second send meets the gate, which lets out one attempt and one first write per
// admission, and is refused before a byte goes out. A refused or
// unprocessed stream is therefore reported (connection_reset: the origin's side ended
// it), and retrying is the caller's decision, as on HTTP/1.1.
//
// 421 Misdirected Request over HTTP/2 (RFC 9110 §15.5.20) is sent again once, on an
// HTTP/1.1 connection (h1: a transport that never offers h2), under an admission of its
// own from the request's HopAdmitter, like a redirect hop (fetch.go).

// errMisdirected is hop's word for a 421 over HTTP/2 that the fetch sends again on
// HTTP/1.1.
var errMisdirected = errors.New("fetch: 421 Misdirected Request over HTTP/2")

// errNoHeadersInTime: no response headers within ResponseTimeout of the stream's HEADERS
// (net/http's ResponseHeaderTimeout covers HTTP/1.1 only).
var errNoHeadersInTime error = timeoutError("fetch: no response headers in time (HTTP/2)")

var errFetcherClosed = errors.New("fetch: the fetcher is closed")

type timeoutError string

func (e timeoutError) Error() string   { return string(e) }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

// errConnTakesNoStream tells net/http that an HTTP/2 connection can take no new stream
// (closed, GOAWAY): nothing of the request was sent on it. net/http drops the connection
// from its pool and gets another (IsHTTP2NoCachedConnError is the method it looks for).
type errConnTakesNoStream struct{}

func (errConnTakesNoStream) Error() string {
	return "fetch: the HTTP/2 connection takes no new stream; nothing was sent on it"
}
func (errConnTakesNoStream) IsHTTP2NoCachedConnError() {}

// erringRoundTripper is what TLSNextProto returns when the HTTP/2 connection could not be
// set up: net/http fails the dial with RoundTripErr (the method it looks for).
type erringRoundTripper struct{ err error }

func (e erringRoundTripper) RoundTripErr() error                             { return e.err }
func (e erringRoundTripper) RoundTrip(*http.Request) (*http.Response, error) { return nil, e.err }

type ticketKey struct{}

// withTicket puts the hop's wire ticket where h2Conn finds it: the request's context.
func withTicket(ctx context.Context, t *wireTicket) context.Context {
	return context.WithValue(ctx, ticketKey{}, t)
}

func ticketOf(ctx context.Context) *wireTicket {
	t, _ := ctx.Value(ticketKey{}).(*wireTicket)
	return t
}

// h2Pool makes and tracks the fetcher's HTTP/2 connections. net/http's pool holds them
// for reuse but never closes one (HTTP/2 connections close themselves), so Close closes
// the idle ones here.
type h2Pool struct {
	t               *http2.Transport
	responseTimeout time.Duration

	mu       sync.Mutex
	conns    map[*http2.ClientConn]struct{}
	pruned   int  // len(conns) at the last pruning of closed connections
	isClosed bool // the fetcher closed: a connection that finishes its handshake now is closed
}

func newH2Pool(responseTimeout time.Duration) *h2Pool {
	return &h2Pool{
		t: &http2.Transport{
			DisableCompression: true,    // we ask for codings and decode them under the cap (body.go)
			MaxHeaderListSize:  1 << 20, // as MaxResponseHeaderBytes on HTTP/1.1
			// An idle connection closes itself after this, as net/http's do; no PINGs
			// (ReadIdleTimeout 0): a crawler does not keep connections warm.
			IdleConnTimeout: 90 * time.Second,
		},
		responseTimeout: responseTimeout,
		conns:           map[*http2.ClientConn]struct{}{},
	}
}

// upgrade is TLSNextProto["h2"]: c, dialled through the guard, negotiated h2.
func (p *h2Pool) upgrade(_ string, c *tls.Conn) http.RoundTripper {
	wc := wireConnOf(c)
	if wc != nil {
		// Its writes are frames of many streams: no request arms it (GotConn); each
		// stream passes its gate in h2Conn.RoundTrip instead.
		wc.isH2.Store(true)
	}
	cc, err := p.t.NewClientConn(c)
	if err != nil {
		c.NetConn().Close()
		return erringRoundTripper{err}
	}
	p.mu.Lock()
	if p.isClosed {
		p.mu.Unlock()
		cc.Close()
		return erringRoundTripper{errFetcherClosed}
	}
	if len(p.conns) >= 2*max(p.pruned, 64) {
		for k := range p.conns {
			if k.State().Closed {
				delete(p.conns, k)
			}
		}
		p.pruned = len(p.conns)
	}
	p.conns[cc] = struct{}{}
	p.mu.Unlock()
	hc := &h2Conn{cc: cc, conn: c, responseTimeout: p.responseTimeout}
	if wc != nil {
		if o := wc.own.Swap(nil); o != nil {
			o.ready(hc) // the hop that dialled it may be waiting for it (owndial.go)
		}
	}
	return hc
}

// close closes every HTTP/2 connection with no stream open or reserved, and any made
// from now on. A connection still in use closes itself once idle for the idle timeout.
func (p *h2Pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isClosed = true
	for cc := range p.conns {
		st := cc.State()
		if st.Closed || (st.StreamsActive == 0 && st.StreamsReserved == 0 && st.StreamsPending == 0) {
			cc.Close()
			delete(p.conns, cc)
		}
	}
}

// h2Conn is one HTTP/2 connection as net/http's pool sees it: each RoundTrip is one
// stream, gated as one request.
type h2Conn struct {
	cc              *http2.ClientConn
	conn            *tls.Conn
	responseTimeout time.Duration
	used            atomic.Bool // a stream was opened on it before
}

func (c *h2Conn) RoundTrip(req *http.Request) (*http.Response, error) {
	t := ticketOf(req.Context())
	if t == nil {
		return nil, errNotOurConn // a request that is not one of hop's: nothing goes out
	}
	// A connection that closed before its first stream still says it can take one (x/net
	// lets that request fail, to surface the error), but nothing would be written: the
	// gate's write must not be spent on it, and the request's own connection may be coming.
	if !c.cc.CanTakeNewRequest() || c.cc.State().Closed {
		return c.noStream(req, t)
	}
	// net/http calls GotConn for HTTP/1.1 only, and a ClientConn's RoundTrip does not:
	// the hop's trace learns of the connection here.
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil && tr.GotConn != nil {
		tr.GotConn(httptrace.GotConnInfo{Conn: c.conn, Reused: c.used.Swap(true)})
	}
	if err := t.Sending(); err != nil {
		return nil, err
	}
	// Not cancelled on success: the body is read under it. It ends with the hop's context.
	ctx, cancel := context.WithCancelCause(req.Context())
	// The header timer starts when the HEADERS frame is written, on the connection's
	// goroutine, and stops when RoundTrip returns; a late WroteHeaders must not start it
	// after that (it would cut the body off).
	var mu sync.Mutex
	returned := false
	timer := time.AfterFunc(time.Hour, func() { cancel(errNoHeadersInTime) })
	timer.Stop()
	trace := &httptrace.ClientTrace{WroteHeaders: func() {
		t.Wrote()
		mu.Lock()
		if !returned {
			timer.Reset(c.responseTimeout)
		}
		mu.Unlock()
	}}
	resp, err := c.cc.RoundTrip(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
	mu.Lock()
	returned = true
	timer.Stop()
	mu.Unlock()
	if err == nil {
		// An answer came, so the HEADERS went out; WroteHeaders runs on the stream's own
		// goroutine and may come after RoundTrip returned, when the hop is over and the
		// gate closed: the hold would then last until the admission's Done, and a next hop
		// of the same request to the same domain (a 421's second send, a redirect) would
		// wait behind it for writeHoldMax. A second Wrote (the late WroteHeaders before the
		// gate closes) only moves the wire moment later.
		t.Wrote()
	} else {
		if errors.Is(context.Cause(ctx), errNoHeadersInTime) {
			err = errNoHeadersInTime
		}
		cancel(nil)
	}
	return resp, err
}

// httpVersion is health_signal.http_version: the protocol the answer came in.
func httpVersion(resp *http.Response) *string {
	var v string
	switch {
	case resp.ProtoMajor == 2:
		v = "2"
	case resp.ProtoMajor == 1 && resp.ProtoMinor == 0:
		v = "1.0"
	default:
		v = "1.1"
	}
	return &v
}

// enableHTTP2 makes the transport offer h2 first, and keeps an HTTP/1.1-only copy of it
// for 421 answers. The copy shares the dialer (the guard) and the TLS settings.
func (f *Fetcher) enableHTTP2() {
	f.h1 = f.transport.Clone()
	f.h1.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // documented: no HTTP/2
	f.h1.TLSClientConfig.NextProtos = []string{"http/1.1"}
	f.h2 = newH2Pool(f.cfg.ResponseTimeout)
	f.transport.TLSClientConfig.NextProtos = []string{"h2", "http/1.1"}
	f.transport.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{"h2": f.h2.upgrade}
}

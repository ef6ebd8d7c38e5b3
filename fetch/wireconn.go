package fetch

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"

	"downloader/limiter"
)

// The wire moment (SPEC §2, a spent slot): a hop's passage to the wire is a wireTicket,
// the hop's limiter.WireGate (which lets out at most one connection attempt and one first
// write per admission, and nothing once the request is over), reached from the dial
// through the context (netguard's ConnectHook) and from the connection's write through
// wireConn. net/http dials apart from the request: the dial's context keeps the
// request's values but not its cancellation, a dial started for one request may serve
// another, and a dial may start after its request took an idle connection or even ended.

var (
	// errTicketOver refuses a dial or a write of a request that already ended.
	errTicketOver = limiter.ErrWireOver
	// errTicketUsed refuses a second connection attempt or a second first write of one
	// admission: each is a request of its own (a transport's retry, say).
	errTicketUsed = limiter.ErrWireUsed
)

// wireTicket is one hop's passage to the wire: its gate. Safe for concurrent use: the dial goroutine, the
// transport's write loop and the request's goroutine all use it.
type wireTicket struct {
	// The gate's Connecting and Connected are netguard's ConnectHook (owndial.go tells
	// own of them too).
	*limiter.WireGate
	// own is the connection the hop's own attempt makes (owndial.go). Apart from the
	// ticket: the connection it dials points to it until it is ready or in use, and must
	// not keep the hop's context alive while it idles in the pool.
	own *ownDial
}

func newWireTicket(ctx context.Context, adm *limiter.Admission) *wireTicket {
	return &wireTicket{WireGate: limiter.NewWireGate(ctx, adm), own: &ownDial{}}
}

// write writes p, the request's first bytes, to c once the limiter lets them out, and
// tells the limiter they were written.
func (t *wireTicket) write(c net.Conn, p []byte) (int, error) {
	return t.Send(func() (int, error) { return c.Write(p) })
}

// finish ends the ticket: nothing more goes out under it, and the admission is the
// caller's again. It returns how many second sends were refused and the failed wait's
// error, if any.
func (t *wireTicket) finish() (refused int, wireErr error) { return t.Close() }

// wireConn is every connection the fetcher dials. It holds the first write of an armed
// request until the request's ticket lets it out, so the wire moment is the write itself:
// no goroutine hand-off or scheduling delay can separate the limiter's decision from the
// bytes leaving (GotConn runs on the caller's goroutine, the write on the transport's
// write loop, and on a loaded machine the two can be many ms apart).
type wireConn struct {
	net.Conn
	// isH2: the connection speaks HTTP/2 (h2.go): its writes are frames of many streams,
	// so no request arms it; each stream passes its own gate.
	isH2 atomic.Bool
	// own is the attempt of the hop that dialled it, told when the connection is ready
	// for HTTP/2 (h2Pool.upgrade) or closes before (owndial.go); nil after.
	own atomic.Pointer[ownDial]

	mu    sync.Mutex
	armed *wireTicket // guarded by mu
}

// arm makes the next Write go through t. GotConn arms the connection it hands a request;
// the TLS handshake's writes come before and pass freely.
func (c *wireConn) arm(t *wireTicket) {
	c.own.Store(nil) // an HTTP/1.1 connection in use: no hop waits for it (owndial.go)
	c.mu.Lock()
	c.armed = t
	c.mu.Unlock()
}

func (c *wireConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	t := c.armed
	c.armed = nil
	c.mu.Unlock()
	if t == nil {
		return c.Conn.Write(p)
	}
	return t.write(c.Conn, p)
}

// Close closes the connection; before it was ready for HTTP/2, that ends the attempt of
// the hop that dialled it.
func (c *wireConn) Close() error {
	if o := c.own.Swap(nil); o != nil {
		o.end(errOwnConnClosed)
	}
	return c.Conn.Close()
}

// wireConnOf finds our wrapper under a connection handed to GotConn.
func wireConnOf(c net.Conn) *wireConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	wc, _ := c.(*wireConn)
	return wc
}

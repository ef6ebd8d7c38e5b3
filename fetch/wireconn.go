package fetch

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"

	"downloader/limiter"
)

// The wire moment (SPEC §2, a spent slot). A request spends its domain's slot from the
// moment it may send a packet to the origin's address: the connection attempt of a new
// connection (after DNS and the SSRF check: netguard's ConnectHook), or its first write
// on a reused one. From the attempt on, the domain is held until the request's first
// write returns, and the wire moment moves forward to that write, so neither a failing
// site nor a slow handshake lets the next request in early.
//
// net/http dials apart from the request: the dial's context keeps the request's values
// but not its cancellation, a dial started for one request may serve another, and a dial
// may start after its request took an idle connection or even ended. So a request's
// passage to the wire is a wireTicket, reached from the dial through the context and from
// the connection's write through wireConn, that lets out at most one connection attempt
// and one first write per admission, and nothing once the request is over.

var (
	// errTicketOver refuses a dial or a write of a request that already ended.
	errTicketOver = errors.New("fetch: the request is over: nothing more of it goes out")
	// errTicketUsed refuses a second connection attempt or a second first write of one
	// admission: each is a request of its own (a transport's retry, say).
	errTicketUsed = errors.New("fetch: this request already went out once: a second send needs its own admission")
)

// wireTicket is one hop's passage to the wire. Safe for concurrent use: the dial
// goroutine, the transport's write loop and the request's goroutine all use it, and every
// use of the admission is under mu (an Admission is not safe for concurrent use).
type wireTicket struct {
	ctx    context.Context // the request's: ends with it, unlike a dial's
	cancel context.CancelFunc

	mu        sync.Mutex
	adm       *limiter.Admission
	onWire    func() // tests: runs after the write's wait let the request out
	attempted bool   // a connection attempt went out under this admission
	held      bool   // that attempt holds the domain until the write (or EndHold)
	wrote     bool   // the first write went out (or was refused)
	over      bool
	wireErr   error // a wait for the limiter that failed
	refused   int   // attempts and writes refused as second ones
}

func newWireTicket(ctx context.Context, adm *limiter.Admission) *wireTicket {
	if adm == nil {
		adm = &limiter.Admission{} // the zero admission: every method does nothing
	}
	t := &wireTicket{adm: adm}
	t.ctx, t.cancel = context.WithCancel(ctx)
	return t
}

// Connecting is netguard's ConnectHook: a new connection is about to be attempted. The
// first attempt of the admission waits for the limiter and holds the domain; any other
// attempt, or one after the request ended, is refused before any packet.
func (t *wireTicket) Connecting(dialCtx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.over:
		return errTicketOver
	case t.attempted || t.wrote:
		t.refused++
		return errTicketUsed
	}
	t.attempted = true
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	stop := context.AfterFunc(dialCtx, cancel) // the dial's own end (connect timeout, Close)
	defer stop()
	if err := t.adm.WaitWireAndHold(ctx); err != nil {
		t.wireErr = err
		return err
	}
	t.held = true
	return nil
}

// Connected is netguard's ConnectHook: the attempt ended. A failed attempt ends the hold,
// so the next request is spaced from the attempt's start, not from the failure.
func (t *wireTicket) Connected(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil && t.held && !t.wrote && !t.over {
		t.adm.EndHold()
		t.held = false
	}
}

// write writes p, the request's first bytes, to c once the limiter lets them out, and
// tells the limiter they were written.
func (t *wireTicket) write(c net.Conn, p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.over:
		return 0, errTicketOver
	case t.wrote:
		t.refused++
		return 0, errTicketUsed
	}
	t.wrote = true
	var err error
	if t.attempted {
		err = t.adm.WaitWriteAndHold(t.ctx)
	} else {
		err = t.adm.WaitWireAndHold(t.ctx)
	}
	if err != nil {
		t.wireErr = err
		return 0, err
	}
	if t.onWire != nil {
		t.onWire()
	}
	n, err := c.Write(p)
	t.adm.Wrote()
	t.held = false
	return n, err
}

func (t *wireTicket) setOnWire(f func()) {
	t.mu.Lock()
	t.onWire = f
	t.mu.Unlock()
}

// finish ends the ticket: nothing more goes out under it, and the admission is the
// caller's again. It returns the failed wait's error, if any, and how many second sends
// were refused.
func (t *wireTicket) finish() (wireErr error, refused int) {
	t.cancel() // ends a wait in progress, which holds mu
	t.mu.Lock()
	defer t.mu.Unlock()
	t.over = true
	return t.wireErr, t.refused
}

// wireConn is every connection the fetcher dials. It holds the first write of an armed
// request until the request's ticket lets it out, so the wire moment is the write itself:
// no goroutine hand-off or scheduling delay can separate the limiter's decision from the
// bytes leaving (GotConn runs on the caller's goroutine, the write on the transport's
// write loop, and on a loaded machine the two can be many ms apart).
type wireConn struct {
	net.Conn

	mu    sync.Mutex
	armed *wireTicket // guarded by mu
}

// arm makes the next Write go through t. GotConn arms the connection it hands a request;
// the TLS handshake's writes come before and pass freely.
func (c *wireConn) arm(t *wireTicket) {
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

// wireConnOf finds our wrapper under a connection handed to GotConn.
func wireConnOf(c net.Conn) *wireConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	wc, _ := c.(*wireConn)
	return wc
}

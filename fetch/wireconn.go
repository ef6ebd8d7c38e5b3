package fetch

import (
	"context"
	"crypto/tls"
	"net"
	"sync"

	"downloader/limiter"
)

// wireConn is every connection the fetcher dials. It holds the first write of an armed
// request until the limiter lets it out, so the on-the-wire moment of SPEC §2 is the
// write itself: no goroutine hand-off or scheduling delay can separate the limiter's
// decision from the bytes leaving (GotConn runs on the caller's goroutine, the write on
// the transport's write loop, and on a loaded machine the two can be many ms apart).
type wireConn struct {
	net.Conn

	mu    sync.Mutex
	armed *wireGate // guarded by mu
}

// wireGate is one request's pending wire wait.
type wireGate struct {
	ctx    context.Context
	adm    *limiter.Admission
	onWire func() // runs after the wait let the request out (tests)

	taken chan struct{} // closed when a Write took the gate
	done  chan struct{} // closed when that Write's wait ended
	err   error         // the wait's error; read after done
}

// arm makes the next Write wait for adm. The caller must call disarm before it touches adm
// again: the wait runs on the transport's write goroutine.
func (c *wireConn) arm(ctx context.Context, adm *limiter.Admission, onWire func()) *wireGate {
	g := &wireGate{ctx: ctx, adm: adm, onWire: onWire, taken: make(chan struct{}), done: make(chan struct{})}
	c.mu.Lock()
	c.armed = g
	c.mu.Unlock()
	return g
}

// disarm withdraws g if no Write took it, or waits for the Write's wait to end. It returns
// the wait's error, if any.
func (c *wireConn) disarm(g *wireGate) error {
	c.mu.Lock()
	if c.armed == g {
		c.armed = nil
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	select {
	case <-g.taken:
		<-g.done
		return g.err
	default:
		return nil
	}
}

func (c *wireConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	g := c.armed
	c.armed = nil
	if g != nil {
		close(g.taken)
	}
	c.mu.Unlock()
	if g == nil {
		return c.Conn.Write(p)
	}
	defer close(g.done)
	if g.err = g.adm.WaitWireAndHold(g.ctx); g.err != nil {
		return 0, g.err
	}
	if g.onWire != nil {
		g.onWire()
	}
	n, err := c.Conn.Write(p)
	g.adm.Wrote()
	return n, err
}

// wireConnOf finds our wrapper under a connection handed to GotConn.
func wireConnOf(c net.Conn) *wireConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	wc, _ := c.(*wireConn)
	return wc
}

package fetch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// A hop's own connection (SPEC §2: one connection attempt and one first write per
// admission, and every request on the wire through its host's admission).
//
// net/http binds connections to requests late: a request that found no idle connection
// starts a dial, and takes whichever connection is ready first, its own dial's or one that
// another dial put in the pool meanwhile (an HTTP/2 connection is handed to every request
// waiting for one). That other connection may already take no new stream (the origin sent
// GOAWAY or closed it, seen by its read loop after the pool took it). net/http then asks
// again, and a second ask starts a second dial, which the hop's gate refuses (its one
// attempt went out with the first dial, still under way): the request failed as
// connection_reset although nothing of it was sent and its own connection was coming.
//
// So the hop knows its own attempt (ownDial): its start (the gate's Connecting), its end
// without a connection (a failed connect, a TLS failure, a connection closed before it
// was ready, an answer other than h2), and the HTTP/2 connection it made (h2Pool.upgrade,
// through the dialled wireConn). h2Conn.RoundTrip, turned away by a connection that takes
// no new stream, waits for the hop's own connection when its attempt is under way and
// opens the stream there, through the same gate: no second attempt, no second admission.

// errOwnConnClosed: the hop's own connection closed before it was ready for a stream (a
// TLS failure that net/http closed it on, or HTTP/2 setup that failed).
var errOwnConnClosed = errors.New("fetch: the request's own connection closed before it was ready")

// errOwnConnNotH2: the hop's own connection speaks HTTP/1.1 (the origin stopped offering
// h2 between connections): net/http pools it for HTTP/1.1.
var errOwnConnNotH2 = errors.New("fetch: the request's own connection does not speak HTTP/2")

type ownState int

const (
	ownNone     ownState = iota // the hop made no connection attempt
	ownDialling                 // its attempt went out; the connection is not ready yet
	ownReady                    // it made an HTTP/2 connection: conn
	ownEnded                    // it made none it can use: err
)

// ownDial is one hop's own connection attempt. Safe for concurrent use: the dial goroutine
// tells it, the request's goroutine waits on it.
type ownDial struct {
	mu      sync.Mutex
	state   ownState      // guarded by mu
	conn    *h2Conn       // ownReady; guarded by mu
	err     error         // ownEnded; guarded by mu
	changed chan struct{} // closed when state leaves ownDialling; guarded by mu
}

// start: the hop's attempt passed its gate (there is one per hop).
func (o *ownDial) start() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.state == ownNone {
		o.state = ownDialling
		o.changed = make(chan struct{})
	}
}

func (o *ownDial) settleLocked(st ownState, c *h2Conn, err error) {
	if o.state != ownDialling {
		return
	}
	o.state, o.conn, o.err = st, c, err
	close(o.changed)
}

// ready: the attempt made c, an HTTP/2 connection.
func (o *ownDial) ready(c *h2Conn) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.settleLocked(ownReady, c, nil)
}

// end: the attempt made no connection the hop can open a stream on.
func (o *ownDial) end(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.settleLocked(ownEnded, nil, err)
}

// tlsDone is the hop's TLSHandshakeDone, which net/http calls for the dials the request
// started (at most one passes the gate): a failed handshake, or one that did not pick h2,
// gives the hop no HTTP/2 connection.
func (o *ownDial) tlsDone(cs tls.ConnectionState, err error) {
	switch {
	case err != nil:
		o.end(fmt.Errorf("the request's own connection: %w", err))
	case cs.NegotiatedProtocol != "h2":
		o.end(errOwnConnNotH2)
	}
}

// wait returns the attempt's state once it is not ownDialling, or ctx's error first.
func (o *ownDial) wait(ctx context.Context) (ownState, *h2Conn, error) {
	o.mu.Lock()
	st, changed := o.state, o.changed
	o.mu.Unlock()
	if st == ownDialling {
		select {
		case <-changed:
		case <-ctx.Done():
			return ownDialling, nil, context.Cause(ctx)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.state, o.conn, o.err
}

// Connecting is netguard's ConnectHook (the gate's), marking the hop's own attempt.
func (t *wireTicket) Connecting(dialCtx context.Context) error {
	if err := t.WireGate.Connecting(dialCtx); err != nil {
		return err
	}
	t.own.start()
	return nil
}

// Connected is netguard's ConnectHook (the gate's): a failed connect ends the hop's own
// attempt.
func (t *wireTicket) Connected(err error) {
	t.WireGate.Connected(err)
	if err != nil {
		t.own.end(err)
	}
}

// noStream is h2Conn.RoundTrip on a connection that takes no new stream (nothing of req
// was sent on it). With its own attempt under way the hop waits for it and opens the
// stream on that connection; with an attempt that failed it fails with that attempt's
// error (its one attempt is spent: the origin, or the path to it, failed it). Otherwise
// net/http is told to ask again (errConnTakesNoStream), and its dial is the hop's first
// attempt, or, when the hop's own connection is this one (it took no stream from its
// first), a second one that the gate refuses.
func (c *h2Conn) noStream(req *http.Request, t *wireTicket) (*http.Response, error) {
	st, own, err := t.own.wait(req.Context())
	switch {
	case st == ownDialling:
		return nil, err // the request ended first
	case st == ownReady && own != c:
		return own.RoundTrip(req)
	case st == ownEnded && !errors.Is(err, errOwnConnNotH2):
		return nil, err
	}
	return nil, errConnTakesNoStream{}
}

package limiter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// The wire moment (SPEC §2, a spent slot). A request spends its domain's slot from the
// moment it may send a packet to the origin's address: the connection attempt of a new
// connection (after DNS and the SSRF check: netguard's ConnectHook), or its first write
// on a reused one. From the attempt on, the domain is held until the request's first
// write returns, and the wire moment moves forward to that write, so neither a failing
// site nor a slow handshake lets the next request in early.
//
// A client does not tie its connections to its requests: net/http dials apart from the
// request (a dial may serve another request, or start after its request ended), and a
// browser opens connections of its own. So each admission has a WireGate between it and
// the wire, which both the fetcher and the render proxy put in front of their dials and
// writes: it lets out at most one connection attempt and one first write per admission,
// in the order the Admission's methods require (WireAndHold at the attempt, WriteAndHold
// at the write after one, Wrote after it, EndHold when the attempt failed), and nothing
// once its request is over.

var (
	// ErrWireOver refuses a connection attempt or a write of a request that already ended.
	ErrWireOver = errors.New("limiter: the request is over: nothing more of it goes out")
	// ErrWireUsed refuses a second connection attempt or a second first write of one
	// admission: each is a request of its own (a transport's retry, say).
	ErrWireUsed = errors.New("limiter: this request already went out once: a second send needs its own admission")
)

// WireGate is one admission's passage to the wire. Create it with NewWireGate. It has two
// forms of each step: one that waits on the limiter's clock (Connecting, Send: the
// fetcher, whose dial and write run on goroutines of their own), and one that answers at
// once with the time to wait (AttemptAt, WriteAt: the render proxy, which waits on its
// pool's clock and chooses among several admissions which one a connection belongs to).
//
// Safe for concurrent use: every use of the admission is under the gate's lock (an
// Admission is not safe for concurrent use), and the caller touches the admission again
// only after Close, or under a lock of its own that it also holds around the gate.
type WireGate struct {
	ctx      context.Context // the request's: waits end with it, or with Close
	isClosed atomic.Bool     // Close began: a wait from now on fails at once

	// A wait's context (ctx, ended by Close too) is made by the first step that has to
	// wait: most steps may go out at once and need none. wmu is never held while waiting.
	wmu     sync.Mutex
	waitCtx context.Context
	cancel  context.CancelFunc

	mu        sync.Mutex
	adm       *Admission
	attempted bool // a connection attempt went out under this admission (or its wait failed)
	held      bool // that attempt holds the domain until the write (or EndHold)
	wrote     bool // the first write went out (or its wait failed)
	over      bool
	err       error // a wait for the limiter that failed
	refused   int   // attempts and writes refused as second ones
}

// NewWireGate returns the gate of adm, for a request that lasts as long as ctx (a nil adm
// is the zero Admission: every step lets out at once and tells nobody). The caller keeps
// adm and gives it back (Done, Cancel) after Close.
func NewWireGate(ctx context.Context, adm *Admission) *WireGate {
	if adm == nil {
		adm = &Admission{}
	}
	return &WireGate{ctx: ctx, adm: adm}
}

// ended is why a wait would fail at once, if it would: the request or the dial (dialCtx;
// the request's own for a write) is over, or Close began.
func (g *WireGate) ended(dialCtx context.Context) error {
	if g.isClosed.Load() {
		return context.Canceled
	}
	if err := g.ctx.Err(); err != nil {
		return err
	}
	return dialCtx.Err()
}

// waitContext is the context a wait ends with: the request's, ended by Close too.
func (g *WireGate) waitContext() context.Context {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.waitCtx == nil {
		g.waitCtx, g.cancel = context.WithCancel(g.ctx)
		if g.isClosed.Load() { // Close found no context to end: this one starts ended
			g.cancel()
		}
	}
	return g.waitCtx
}

// admitNow is the first look of a step that may wait (the wire moment with hold, again as
// Admission.wire takes them): done (nil) when the step may go out now or the admission is
// the zero one, else the error of a request, dial or gate already over, else errMustWait.
func (g *WireGate) admitNow(dialCtx context.Context, again bool) error {
	if !g.adm.Admitted() {
		return nil
	}
	if err := g.ended(dialCtx); err != nil {
		return err
	}
	if g.adm.wireNow(true, again) == 0 {
		return nil
	}
	return errMustWait
}

// errMustWait: admitNow's step has to wait for the limiter.
var errMustWait = errors.New("limiter: the step waits for its turn")

// AwaitsAttempt reports whether a connection attempt would be this admission's: none went
// out yet, nor a write, and the request is not over.
func (g *WireGate) AwaitsAttempt() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.attempted && !g.wrote && !g.over
}

// AwaitsWrite reports whether a first write would be this admission's.
func (g *WireGate) AwaitsWrite() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.wrote && !g.over
}

// refuseLocked is why a step is refused, if it is: the request is over, or the step went
// out once. Requires g.mu held.
func (g *WireGate) refuseLocked(used bool) error {
	switch {
	case g.over:
		return ErrWireOver
	case used:
		g.refused++
		return ErrWireUsed
	}
	return nil
}

// Connecting is netguard's ConnectHook: a new connection is about to be attempted. The
// first attempt of the admission waits for the limiter (until dialCtx or the request
// ends) and holds the domain; any other attempt, or one after the request ended, is
// refused before any packet. A failed wait uses the attempt up.
func (g *WireGate) Connecting(dialCtx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.refuseLocked(g.attempted || g.wrote); err != nil {
		return err
	}
	g.attempted = true
	// Most attempts may go out at once (the task waited for its slot before it fetched):
	// ask without waiting first, so that only an attempt that has to wait pays for the
	// context that ends the wait with either the dial or the request.
	err := g.admitNow(dialCtx, false)
	if err == errMustWait {
		ctx, cancel := context.WithCancel(g.waitContext())
		stop := context.AfterFunc(dialCtx, cancel) // the dial's own end (connect timeout, Close)
		err = g.adm.WaitWireAndHold(ctx)
		stop()
		cancel()
	}
	if err != nil {
		g.err = err
		return err
	}
	g.held = true
	return nil
}

// AttemptAt is Connecting that does not wait: 0 when the attempt may go out now (the
// domain is held from now on), else the time to wait before asking again.
func (g *WireGate) AttemptAt(now time.Time) (time.Duration, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.refuseLocked(g.attempted || g.wrote); err != nil {
		return 0, err
	}
	d := g.adm.WireAndHold(now)
	if d == 0 {
		g.attempted, g.held = true, true
	}
	return d, nil
}

// Connected is netguard's ConnectHook: the attempt ended. A failed attempt ends the hold,
// so the next request is spaced from the attempt's start, not from the failure.
func (g *WireGate) Connected(err error) {
	if err == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held && !g.wrote && !g.over {
		g.adm.EndHold()
		g.held = false
	}
}

// Send runs write, the request's first write, once the limiter lets it out (waiting until
// the request ends), then tells the limiter it was written (Wrote: also after a failed
// write, which ends the hold). Close waits for a Send in progress. A second first write,
// or one after the request ended, is refused; a failed wait uses the write up.
func (g *WireGate) Send(write func() (int, error)) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.refuseLocked(g.wrote); err != nil {
		return 0, err
	}
	g.wrote = true
	if err := g.waitWrite(); err != nil {
		g.err = err
		return 0, err
	}
	n, err := write()
	g.wroteLocked()
	return n, err
}

// waitWrite is the wait of a first write (Send, Sending): WriteAndHold after a connection
// attempt of this admission, else WireAndHold, waiting only when it must. Requires g.mu
// held.
func (g *WireGate) waitWrite() error {
	err := g.admitNow(g.ctx, g.attempted) // a write has no dial of its own: the request's context stands for it
	if err != errMustWait {
		return err
	}
	if g.attempted {
		return g.adm.WaitWriteAndHold(g.waitContext())
	}
	return g.adm.WaitWireAndHold(g.waitContext())
}

// WriteAt is Send that does not wait and does not write: 0 when the first write may go
// out now, else the time to wait before asking again. After a 0, the caller writes, then
// calls Wrote.
func (g *WireGate) WriteAt(now time.Time) (time.Duration, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.refuseLocked(g.wrote); err != nil {
		return 0, err
	}
	var d time.Duration
	if g.attempted { // on the wire since its attempt: move forward to the write
		d = g.adm.WriteAndHold(now)
	} else {
		d = g.adm.WireAndHold(now)
	}
	if d == 0 {
		g.wrote, g.held = true, true
	}
	return d, nil
}

// Wrote tells the limiter that the write WriteAt let out was handed to the socket
// (Admission.Wrote: the wire moment moves to now, and the hold ends). It does nothing
// before that write, or once the request is over (the admission is the caller's again).
func (g *WireGate) Wrote() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.wrote && !g.over {
		g.wroteLocked()
	}
}

func (g *WireGate) wroteLocked() {
	g.adm.Wrote()
	g.held = false
}

// Close ends the request: a wait in progress ends, and nothing more goes out under the
// gate. It returns how many second sends were refused and the failed wait's error, if
// any. The admission is the caller's again.
func (g *WireGate) Close() (refused int, waitErr error) {
	g.isClosed.Store(true)
	g.wmu.Lock()
	if g.cancel != nil {
		g.cancel() // ends a wait in progress, which holds mu
	}
	g.wmu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.over = true
	return g.refused, g.err
}

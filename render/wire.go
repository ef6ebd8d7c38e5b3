package render

import (
	"context"
	"net"
	"time"

	"downloader/netguard"
)

// The wire moment (SPEC §2, a spent slot): an admission goes on the wire at the first
// connection attempt toward its host (after DNS and the SSRF check: netguard's
// ConnectHook), so a main document whose connect or TLS fails has spent its slot, and
// again when its request's first bytes are about to be written: the wire moment moves
// forward to the write, and the domain is held from the attempt until the write returns,
// so that a slow handshake cannot let the next request to the host reach the origin less
// than the interval after this one. An admission whose request reuses a connection goes
// on the wire at the write alone.
//
// Each admission of a render (the caller's, renderState.first, and each hop's) has a
// limiter.WireGate, the fetcher's too, which keeps that order: one attempt and one first
// write per admission. What is the proxy's own is choosing which admission a connection
// or its first bytes belong to (a browser's connections are not tied to its requests),
// and waiting on the pool's clock: the gates' AttemptAt and WriteAt, under st.mu.

// originConn is a connection of a tab's proxy to an origin. It holds the first request
// bytes to the page's own host (the caller's admission) and those of each admitted hop to
// its host, until the admission lets them out, then tells the limiter they were written.
// The proxy cannot tell which request bytes belong to (a tunnel is opaque), so the first
// request bytes toward a host after its admission are taken to be that admission's.
//
// On a plain HTTP connection every write is request bytes. A tunnel (CONNECT) carries TLS:
// its writes are followed record by record (recordScanner), and the wait is before the
// first application data record, which is the request (TLS 1.2), or the client's Finished
// in the same flight as the request (TLS 1.3). A tunnel that does not start with a TLS
// record is taken to be plain.
//
// Write is called by one goroutine at a time: the transport's write loop, or the tunnel's
// copy toward the origin.
type originConn struct {
	net.Conn
	st      *renderState
	domain  string
	stop    <-chan struct{} // the proxy is closing
	records *recordScanner  // nil: plain HTTP
}

func (c *originConn) Write(b []byte) (int, error) {
	if c.records != nil && !c.records.inData() {
		k := c.records.scan(b)
		if k < 0 {
			return c.Conn.Write(b) // still the handshake
		}
		if k > 0 {
			n, err := c.Conn.Write(b[:k])
			if err != nil {
				return n, err
			}
			m, err := c.gated(b[k:])
			return n + m, err
		}
	}
	return c.gated(b)
}

// gated writes request bytes once the admissions waiting for them let them out.
func (c *originConn) gated(b []byte) (int, error) {
	first, h, err := c.st.wireFor(c.stop, c.domain)
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	if first || h != nil {
		c.st.wrote(first, h) // also after a failed write: it ends the hold
	}
	return n, err
}

// TLS record content types (RFC 8446 §5.1).
const (
	recordChangeCipherSpec = 20
	recordHandshake        = 22
	recordApplicationData  = 23
)

// recordScanner follows the TLS records a client writes, to find where its first
// application data begins. Not safe for concurrent use.
type recordScanner struct {
	started bool
	data    bool    // reached application data (or not TLS): every later byte is data
	hdr     [5]byte // the record header being read, when split across writes
	hdrN    int
	left    int // bytes of the current record's body still to come
}

func (s *recordScanner) inData() bool { return s.data }

// scan consumes b and returns the offset in b where application data starts, or -1 if b
// ends before it. Once it has returned an offset, every later byte is data.
func (s *recordScanner) scan(b []byte) int {
	if s.data {
		return 0
	}
	i := 0
	for i < len(b) {
		if s.left > 0 {
			n := min(s.left, len(b)-i)
			s.left -= n
			i += n
			continue
		}
		if s.hdrN == 0 {
			t := b[i]
			// Anything but the handshake's own records (alerts, heartbeats, or bytes that
			// are not TLS at all) counts as data: waiting too early is safe, too late not.
			if (t != recordChangeCipherSpec && t != recordHandshake) || (!s.started && t != recordHandshake) {
				s.data = true
				return i
			}
			s.started = true
		}
		s.hdr[s.hdrN] = b[i]
		s.hdrN++
		i++
		if s.hdrN == len(s.hdr) {
			s.left = int(s.hdr[3])<<8 | int(s.hdr[4])
			s.hdrN = 0
		}
	}
	return -1
}

// wireFor is called right before request bytes are written to a connection to domain.
// It waits, on the pool's clock, until the admission those bytes belong to lets them out:
// the caller's, if they are the first to the page's host, else the oldest admitted hop to
// domain not yet on the wire, if any. It uses WireAndHold: until wrote, the domain's other
// requests wait for this write, so a write descheduled after the decision cannot let the
// next request follow it early. It reports which admission it wired, for wrote. The
// render's end or stop ends a wait with an error.
func (st *renderState) wireFor(stop <-chan struct{}, domain string) (first bool, h *hopAdmission, err error) {
	if domain == st.domain {
		if first, err = st.wireFirst(stop); err != nil || first {
			return first, nil, err // these bytes are one request: the first
		}
	}
	if st.unwiredHops.Load() == 0 {
		return false, nil, nil
	}
	h, err = st.wireHop(stop, domain)
	return false, h, err
}

// wireFirst lets the first request to the page's host out once the caller's admission
// agrees, and reports whether this was that request.
func (st *renderState) wireFirst(stop <-chan struct{}) (bool, error) {
	for {
		st.mu.Lock()
		switch {
		case st.released:
			st.mu.Unlock()
			return false, errReleased
		case !st.first.AwaitsWrite():
			st.mu.Unlock()
			return false, nil
		case st.adm == nil:
			_, _ = st.first.WriteAt(st.clk.Now()) // no limiter: only marks the first written
			st.mu.Unlock()
			return false, nil
		}
		d, err := st.first.WriteAt(st.clk.Now())
		st.mu.Unlock()
		if err != nil {
			return false, nil // cannot happen: it awaited the write, under st.mu
		}
		if d == 0 {
			return true, nil
		}
		if err := st.sleep(stop, d); err != nil {
			return false, err
		}
	}
}

// wireHop lets the oldest admitted hop to domain not yet on the wire out once its
// admission agrees, and returns it (nil if there is none).
func (st *renderState) wireHop(stop <-chan struct{}, domain string) (*hopAdmission, error) {
	for {
		st.mu.Lock()
		if st.released {
			st.mu.Unlock()
			return nil, errReleased
		}
		var h *hopAdmission
		for _, c := range st.hops {
			if c.domain == domain && c.gate.AwaitsWrite() {
				h = c
				break
			}
		}
		if h == nil {
			st.mu.Unlock()
			return nil, nil
		}
		d, err := h.gate.WriteAt(st.clk.Now())
		if err == nil && d == 0 {
			st.unwiredHops.Add(-1)
		}
		st.mu.Unlock()
		if err != nil {
			return nil, nil // cannot happen: it awaited the write, under st.mu
		}
		if d == 0 {
			return h, nil
		}
		if err := st.sleep(stop, d); err != nil {
			return nil, err
		}
	}
}

// sleep waits d on the pool's clock, unless the render ends or stop is closed first.
func (st *renderState) sleep(stop <-chan struct{}, d time.Duration) error {
	return st.sleepCtx(context.Background(), stop, d)
}

// wrote tells the limiter that the request bytes of the admissions wireFor let out were
// handed to the socket (Admission.Wrote: the wire moment moves to now, and the hold
// ends). The caller's admission is not touched once the render is over: the caller's
// Done or Cancel ends its hold.
func (st *renderState) wrote(first bool, h *hopAdmission) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if first && st.adm != nil && !st.released {
		st.first.Wrote()
	}
	if h != nil {
		h.gate.Wrote()
	}
}

// attemptHook is netguard's ConnectHook for one dial of the proxy toward domain.
type attemptHook struct {
	st     *renderState
	domain string
	stop   <-chan struct{}

	first bool          // the attempt put the caller's admission on the wire
	hop   *hopAdmission // or this hop's
}

// Connecting puts on the wire the admission a connection attempt toward the domain belongs
// to, once it agrees: the caller's, for the first attempt toward the page's host, else the
// oldest admitted hop to the domain not yet on the wire, if any. Like the first write (see
// wireFor), an attempt holds the domain (WireAndHold) until that admission's write or the
// attempt's failure. The gates' AttemptAt cannot refuse here: each awaits its attempt,
// under st.mu.
func (a *attemptHook) Connecting(ctx context.Context) error {
	st := a.st
	for {
		st.mu.Lock()
		if st.released {
			st.mu.Unlock()
			return errReleased
		}
		var d time.Duration
		switch {
		case a.domain == st.domain && st.adm != nil && st.first.AwaitsAttempt():
			if d, _ = st.first.AttemptAt(st.clk.Now()); d == 0 {
				a.first = true
			}
		case st.unwiredHops.Load() > 0:
			var h *hopAdmission
			for _, c := range st.hops {
				if c.domain == a.domain && c.gate.AwaitsAttempt() {
					h = c
					break
				}
			}
			if h == nil {
				break
			}
			if d, _ = h.gate.AttemptAt(st.clk.Now()); d == 0 {
				a.hop = h
			}
		}
		st.mu.Unlock()
		if d == 0 {
			return nil
		}
		if err := st.sleepCtx(ctx, a.stop, d); err != nil {
			return err
		}
	}
}

// sleepCtx is sleep that also ends with ctx (a dial's: the browser gave up the tunnel).
func (st *renderState) sleepCtx(ctx context.Context, stop <-chan struct{}, d time.Duration) error {
	t := st.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-st.over:
		return errReleased
	case <-stop:
		return errReleased
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Connected ends the hold of an admission whose connection attempt failed before its
// request was written: the next request is spaced from the attempt, not the failure.
func (a *attemptHook) Connected(err error) {
	if err == nil || (!a.first && a.hop == nil) {
		return
	}
	st := a.st
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case a.first && !st.released:
		st.first.Connected(err)
	case a.hop != nil && !st.released:
		a.hop.gate.Connected(err)
	}
}

var _ netguard.ConnectHook = (*attemptHook)(nil)

package origintest

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Arrival times come from the kernel (SO_TIMESTAMPNS: when the request's first bytes were
// received on the socket), not from when the handler goroutine got to run. On a loaded
// machine the latter lags by whole scheduler slices, differently for new and reused
// connections, and would blame the client for the server's own scheduling.
//
// A stamp belongs to the request whose first bytes it came with. The HTTP origin takes a
// request's stamp when its handler starts; bytes of that request read after (its body,
// the terminator of a chunked body, read by the server before it answers) must not stamp
// the next request on the connection, which would then seem to arrive when they did: a
// client whose request went out in two writes (net/http sends a body it cannot size in
// time as chunked, headers first) would be blamed for a gap it never made. So after a
// claim the connection stamps nothing until the server is done with the request
// (http.StateIdle), and the next stamp is the next request's first byte. (A next request
// read together with the previous one's last bytes, as a pipelining client sends it, is
// then unstamped: counted by UnstampedCount, never stamped early.)
//
// The kernel stamps a segment, not a byte, and when segments queue up unread it merges
// them and keeps the later stamp: a request that came in several segments is stamped no
// earlier than its first, and at most as late as the last one read with it.

type connKey struct{}

// stampListener enables kernel receive timestamps on every accepted connection. The
// option is set on the listening socket too, so that an accepted socket has it from its
// first byte: a request that reached the kernel before Accept returned would otherwise
// carry no timestamp, and fall back to the handler's (late) clock.
type stampListener struct{ net.Listener }

// newStampListener sets SO_TIMESTAMPNS on l's socket, which accepted sockets inherit, and
// returns once the kernel stamps received packets (awaitKernelStamps).
func newStampListener(l net.Listener) stampListener {
	if tl, ok := l.(*net.TCPListener); ok {
		if rc, err := tl.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) {
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
			})
		}
	}
	awaitKernelStamps()
	return stampListener{l}
}

// awaitKernelStamps returns once the kernel stamps the packets it receives. Receive
// timestamps are one switch for the whole machine, turned on when the first socket asks
// for them and off when the last one that did is closed; turning it on is deferred to a
// kernel work queue (net_enable_timestamp), so packets received in between carry no time.
// On a loaded machine that window lasted long enough for a test's first requests to come
// unstamped. The listener keeps the switch on while it is open; this waits until it is on,
// by sending a datagram to a stamping socket of its own until one comes back stamped.
// There is no notification to wait on: it retries every millisecond, for at most 10 s.
func awaitKernelStamps() {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) != nil ||
		unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}) != nil {
		return
	}
	self, err := unix.Getsockname(fd)
	if err != nil {
		return
	}
	var buf [1]byte
	var oob [128]byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if unix.Sendto(fd, buf[:], 0, self) != nil {
			return
		}
		_, oobn, _, _, err := unix.Recvmsg(fd, buf[:], oob[:], 0)
		if err != nil {
			return
		}
		if _, ok := receiveTime(oob[:oobn]); ok {
			return
		}
	}
}

func (l stampListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return c, nil
	}
	return &stampConn{TCPConn: tc, rc: rc}, nil
}

// stampConn remembers the kernel receive time of the first byte that no request has
// claimed yet.
type stampConn struct {
	*net.TCPConn
	rc syscall.RawConn

	mu      sync.Mutex
	pending time.Time
	// inRequest: an HTTP request's stamp was claimed and the server is not done with it:
	// what is read meanwhile is still that request's, and stamps nothing.
	inRequest bool
}

func (c *stampConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var (
		n, oobn int
		rerr    error
		oob     [128]byte
	)
	err := c.rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, oob[:], 0)
		return rerr != unix.EAGAIN && rerr != unix.EINTR
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 {
		return 0, io.EOF
	}
	if at, ok := receiveTime(oob[:oobn]); ok {
		c.mu.Lock()
		if c.pending.IsZero() && !c.inRequest {
			c.pending = at
		}
		c.mu.Unlock()
	}
	return n, nil
}

// claim returns the receive time of the first byte read since the last claim and clears
// it (raw origins: ReceivedAt).
func (c *stampConn) claim() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.pending
	c.pending = time.Time{}
	return at, !at.IsZero()
}

// claimRequest is claim for an HTTP request whose handler starts: until requestDone,
// nothing read stamps the next request.
func (c *stampConn) claimRequest() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.pending
	c.pending, c.inRequest = time.Time{}, true
	return at, !at.IsZero()
}

// requestDone is told that the server is done with the connection's request (its answer
// is written, its body read or given up): the next byte read is the next request's.
func (c *stampConn) requestDone() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending, c.inRequest = time.Time{}, false
}

// connState is the origin's http.Server.ConnState: an idle connection waits for its next
// request.
func connState(c net.Conn, s http.ConnState) {
	if sc, ok := stampConnOf(c); ok && s == http.StateIdle {
		sc.requestDone()
	}
}

func receiveTime(oob []byte) (time.Time, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
			return time.Unix(sec, nsec), true
		}
	}
	return time.Time{}, false
}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// arrivalTime is the kernel receive time of r's first byte when known (ok), else now.
func arrivalTime(r *http.Request) (time.Time, bool) {
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		if sc, ok := stampConnOf(c); ok {
			if at, ok := sc.claimRequest(); ok {
				return at, true
			}
		}
	}
	return time.Now(), false
}

// stampConnOf finds the stamping connection under c, which a TLS origin wraps.
func stampConnOf(c net.Conn) (*stampConn, bool) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(*stampConn)
	return sc, ok
}

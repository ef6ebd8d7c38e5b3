package fetch

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"downloader"
	"downloader/netguard"
)

// pipeDialer connects each dial to an in-memory origin (net.Pipe: no socket, so the
// whole exchange runs inside a synctest bubble). hold runs before the n-th connection
// (from 1) is made and may fail it; serve is the origin's side of it.
type pipeDialer struct {
	hold  func(ctx context.Context, n int) error
	serve func(c net.Conn, n int)
	dials atomic.Int64
	wg    sync.WaitGroup
}

func (d *pipeDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	n := int(d.dials.Add(1))
	if err := d.hold(ctx, n); err != nil {
		return nil, err
	}
	client, server := memPipe()
	d.wg.Go(func() { d.serve(server, n) })
	return client, nil
}

// memPipe is a connected pair of in-memory connections whose writes are buffered, as a
// socket's are (net.Pipe's are not: HTTP/2's two sides would block each other writing).
// Its waits are on a sync.Cond, which a synctest bubble sees as durably blocked.
func memPipe() (net.Conn, net.Conn) {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	a, b := &memHalf{}, &memHalf{}
	ac := &memConn{mu: &mu, cond: cond, in: a, out: b}
	bc := &memConn{mu: &mu, cond: cond, in: b, out: a}
	return ac, bc
}

// memHalf is one direction of a memPipe.
type memHalf struct {
	buf    []byte
	closed bool // the writing side closed: reads drain buf, then EOF
}

type memConn struct {
	mu     *sync.Mutex
	cond   *sync.Cond
	in     *memHalf // guarded by mu
	out    *memHalf // guarded by mu
	closed bool     // guarded by mu
}

func (c *memConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.in.buf) == 0 && !c.in.closed && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return 0, net.ErrClosed
	}
	if len(c.in.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.in.buf)
	c.in.buf = c.in.buf[n:]
	return n, nil
}

func (c *memConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.out.closed {
		return 0, net.ErrClosed
	}
	c.out.buf = append(c.out.buf, p...)
	c.cond.Broadcast()
	return len(p), nil
}

func (c *memConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed, c.out.closed = true, true
	c.cond.Broadcast()
	return nil
}

func (c *memConn) LocalAddr() net.Addr              { return memAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return memAddr{} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "mem" }

func withDialer(d netguard.ContextDialer) envOption {
	return func(_ *Config, g *netguard.Config) { g.Dialer = d }
}

// TestH2OwnConnectionAfterAPooledOneTakesNoStream makes net/http's late binding happen
// every time: a fetch that found no idle connection starts its own dial (its one
// connection attempt, through its gate), and before that dial is done net/http hands the
// fetch another HTTP/2 connection that has just been pooled and takes no new stream (the
// state a GOAWAY or a close leaves). The fetch must not ask for a second dial (its gate
// would refuse it, and the fetch would fail as connection_reset with nothing sent): it
// waits for its own connection and sends its request there, or, when its own attempt
// fails, fails with that attempt's cause.
func TestH2OwnConnectionAfterAPooledOneTakesNoStream(t *testing.T) {
	ca, leaf := testLeaf(t)
	now := time.Now() // the certificates' time; a bubble's clock starts in 2000
	// The pooled connection takes no new stream: it received GOAWAY (here: marked not to
	// be reused, the state GOAWAY leaves), or it closed before its first stream (x/net then
	// still says it can take a request, which fails unsent).
	noReuse := func(c *h2Conn) { c.cc.SetDoNotReuse() }
	closeIt := func(c *h2Conn) { c.cc.Close() }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name       string
		pooled     func(c *h2Conn) // what happened to the pooled connection
		ownDial    error           // the fetch's own dial fails with it; nil: it connects
		isTLSCut   bool            // the origin closes the fetch's own connection in its handshake
		wantReason downloader.FailReason
		wantStatus int
		wantConns  int64
	}{
		{"GOAWAY, its own connection comes", noReuse, nil, false, "", 200, 2},
		{"GOAWAY, its own connection is refused", noReuse, refused, false, downloader.FailConnectRefused, 0, 1},
		{"GOAWAY, its own handshake is cut", noReuse, nil, true, downloader.FailTLSFailed, 0, 2},
		{"closed unused, its own connection comes", closeIt, nil, false, "", 200, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := &rawH2Origin{behave: func(int, int) h2Behaviour { return h2Answer }}
				held, release := make(chan struct{}), make(chan struct{})
				d := &pipeDialer{
					// The second dial, the fetch's own, waits until the test lets it go.
					hold: func(ctx context.Context, n int) error {
						if n != 2 {
							return nil
						}
						close(held)
						select {
						case <-release:
							return tc.ownDial
						case <-ctx.Done():
							return ctx.Err()
						}
					},
					serve: func(c net.Conn, n int) {
						o.accepts.Add(1)
						if n == 2 && tc.isTLSCut {
							c.Close()
							return
						}
						sc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, NextProtos: []string{"h2"}})
						defer sc.Close()
						if err := sc.Handshake(); err != nil {
							return
						}
						o.serve(sc, nil, n)
					},
				}
				t.Cleanup(d.wg.Wait) // after the fetcher's Close (cleanups run last first)
				var logs syncBuffer
				e := newEnv(t, nil, withRule("*.example.com::127.0.0.1:8443"), withDialer(d), withConfig(func(c *Config) {
					c.TLSConfig = &tls.Config{RootCAs: ca.Pool(), Time: func() time.Time { return now }}
					c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				}))

				// The first connection is made for a fetch that gives up before it is ready;
				// it is held, ready for HTTP/2, until net/http may pool it.
				upgrade := e.f.transport.TLSNextProto["h2"]
				upgraded, pool := make(chan *h2Conn, 1), make(chan struct{})
				var upgrades atomic.Int64
				e.f.transport.TLSNextProto["h2"] = func(authority string, c *tls.Conn) http.RoundTripper {
					rt := upgrade(authority, c)
					if upgrades.Add(1) == 1 {
						upgraded <- rt.(*h2Conn)
						<-pool
					}
					return rt
				}
				ctx0, cancel0 := context.WithCancel(context.Background())
				done0 := make(chan *downloader.Outcome, 1)
				go func() { done0 <- e.fetch(ctx0, "https://www.example.com/") }()
				first := <-upgraded
				cancel0()
				<-done0

				// The fetch under test finds no idle connection and dials its own.
				done := make(chan *downloader.Outcome, 1)
				go func() { done <- e.fetch(context.Background(), "https://www.example.com/") }()
				<-held
				tc.pooled(first)
				close(pool)     // net/http pools it and hands it to the waiting fetch
				synctest.Wait() // the fetch did what it does with it
				close(release)
				out := <-done
				synctest.Wait() // its own dial, if still going, is done too

				if out.FailReason != tc.wantReason || out.HTTPStatus != tc.wantStatus {
					t.Errorf("fetch: fail_reason %q http_status %d, want %q %d (log: %s)",
						out.FailReason, out.HTTPStatus, tc.wantReason, tc.wantStatus, logs.String())
				}
				if tc.wantStatus == 200 && versionOf(out) != "2" {
					t.Errorf("http_version %s, want 2", versionOf(out))
				}
				if n := o.headers.Load(); n != int64(tc.wantStatus/200) {
					t.Errorf("the origin received %d HEADERS, want %d", n, tc.wantStatus/200)
				}
				if n := o.accepts.Load(); n != tc.wantConns {
					t.Errorf("%d connections reached the origin, want %d", n, tc.wantConns)
				}
				if n := d.dials.Load(); n != 2 {
					t.Errorf("%d dials, want 2: a fetch makes one connection attempt", n)
				}
				if strings.Contains(logs.String(), "refused_count") {
					t.Errorf("the gate was asked for a second attempt: %s", logs.String())
				}
			})
		})
	}
}

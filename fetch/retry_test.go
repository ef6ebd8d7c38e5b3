package fetch

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"downloader"
)

// syncBuffer is a log sink safe for the fetcher's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNoSilentRetryOverIdle: requests have no body, so net/http treats a GET as
// replayable and, when a reused connection drops it before any answer, tries it again on
// another idle connection to the host and then on a new one. The wire ticket refuses
// both (the write before a byte, the dial before any packet): the origin receives the
// request once and the failure is connection_reset.
func TestNoSilentRetryOverIdle(t *testing.T) {
	var arrivals, conns atomic.Int64
	var firstTwo sync.WaitGroup
	firstTwo.Add(2)
	port, accepts := rawListener(t, func(c net.Conn) {
		defer c.Close()
		n := conns.Add(1)
		br := bufio.NewReader(c)
		for i := 0; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			arrivals.Add(1)
			if i > 0 {
				return // read, never answered
			}
			if n <= 2 {
				// Hold the first answers until both connections carry a request, so
				// that the pool ends up with two idle connections to the host.
				firstTwo.Done()
				firstTwo.Wait()
			}
			io.Copy(io.Discard, req.Body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 9\r\n\r\n<p>ok</p>")
		}
	})
	var logs syncBuffer
	e := newEnv(t, nil, withRule("drop.test::127.0.0.1:"+port), withConfig(func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}))
	u, _ := url.Parse("http://drop.test/")
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if out := e.f.Fetch(context.Background(), u, nil, nil); out.FailReason != "" {
				t.Errorf("first requests: fail_reason %q", out.FailReason)
			}
		})
	}
	wg.Wait()
	out := e.f.Fetch(context.Background(), u, nil, nil)
	if out.FailReason != downloader.FailConnectionReset {
		t.Errorf("dropped request: fail_reason %q, want %q", out.FailReason, downloader.FailConnectionReset)
	}
	if n := arrivals.Load(); n != 3 {
		t.Errorf("the origin received %d requests for 3 fetches: a request was sent twice", n)
	}
	if n := accepts.Load(); n != 2 {
		t.Errorf("%d connections, want 2: the resend dialled", n)
	}
	if s := logs.String(); !strings.Contains(s, "not sent again") || !strings.Contains(s, "refused_count=2") {
		t.Errorf("want the resend over the other idle connection and the new one refused (refused_count=2), logged:\n%s", s)
	}
}

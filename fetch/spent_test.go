package fetch

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/limiter"
)

// rawListener accepts TCP connections on 127.0.0.1, counts them and hands each to handle
// on its own goroutine. Cleanup closes the listener and every connection, and waits.
func rawListener(t *testing.T, handle func(c net.Conn)) (port string, accepts *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepts = &atomic.Int64{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { handle(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, accepts
}

// tlsGarbage reads the ClientHello and answers bytes that are not TLS.
func tlsGarbage(c net.Conn) {
	buf := make([]byte, 512)
	c.Read(buf)
	io.WriteString(c, "HELLO THIS IS NOT TLS\r\n\r\n")
	c.Close()
}

// resetAtOnce resets every connection as soon as it is accepted.
func resetAtOnce(c net.Conn) { rst(c) }

// neverAnswers reads whatever comes and never answers, until the test closes it.
func neverAnswers(c net.Conn) { io.Copy(io.Discard, c) }

// TestSpentSlot is SPEC §2's spent slot at the fetcher: a request that may have sent a
// packet to the origin (connect refused, TLS garbage, a reset, a response timeout, a
// success) keeps its admission spent after Cancel, with the wire moment at its connection
// attempt; one refused before any packet (DNS failure, the SSRF guard) gives it back.
func TestSpentSlot(t *testing.T) {
	garbage, _ := rawListener(t, tlsGarbage)
	reset, _ := rawListener(t, resetAtOnce)
	silent, _ := rawListener(t, neverAnswers)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, okPage) })
	e := newEnv(t, o,
		withRule("refused.test::127.0.0.1:"+closedPort(t)),
		withRule("garbage.test::127.0.0.1:"+garbage),
		withRule("reset.test::127.0.0.1:"+reset),
		withRule("silent.test::127.0.0.1:"+silent),
		withConfig(func(c *Config) {
			c.ResponseTimeout = 300 * time.Millisecond
			c.TLSTimeout = 300 * time.Millisecond
		}))
	const iv = time.Minute
	tests := []struct {
		url     string
		reason  downloader.FailReason
		isSpent bool
	}{
		{"http://ok.test/", "", true},
		{"http://refused.test/", downloader.FailConnectRefused, true},
		{"https://garbage.test/", downloader.FailTLSFailed, true},
		{"http://reset.test/", downloader.FailConnectionReset, true},
		{"http://silent.test/", downloader.FailResponseTimeout, true},
		{"http://nx.example/", downloader.FailDomainNotFound, false}, // nothing sent to the origin's address
		{"http://servfail.example/", downloader.FailResolverUnavailable, false},
		{"http://evil.example/", downloader.FailDestinationForbidden, false},
		{"http://meta.example/", downloader.FailDestinationForbidden, false},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			fake := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			l := limiter.New(fake)
			fake.Advance(time.Hour)
			u, _ := url.Parse(tt.url)
			domain, _ := downloader.CanonicalHost(u.Hostname())
			adm, wait := l.Allow(fake.Now(), domain, iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
			if wait != 0 {
				t.Fatalf("not admitted: %v", wait)
			}
			out := e.f.Fetch(context.Background(), u, &adm, e.admitter())
			adm.Cancel()
			if out.FailReason != tt.reason {
				t.Errorf("fail_reason = %q, want %q", out.FailReason, tt.reason)
			}
			next, wait := l.Allow(fake.Now(), domain, iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
			next.Cancel()
			switch {
			case tt.isSpent && wait != iv:
				t.Errorf("next request's wait = %v, want a full interval %v from the attempt: the slot is spent", wait, iv)
			case !tt.isSpent && wait != 0:
				t.Errorf("next request's wait = %v, want 0: nothing was sent, the slot is given back", wait)
			}
		})
	}
}

// dropsKeptAlive answers the first request on a connection with a kept-alive 200, then
// reads the next request and closes without answering (a server dropping keep-alives, or
// restarting). It counts request arrivals.
func dropsKeptAlive(arrivals *atomic.Int64) func(c net.Conn) {
	return func(c net.Conn) {
		defer c.Close()
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
			io.Copy(io.Discard, req.Body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 9\r\n\r\n<p>ok</p>")
		}
	}
}

// TestNoSilentRetry: when a reused connection fails after the request was written and
// before any answer, the request is not sent again on a new connection by the transport
// (net/http does so for a replayable GET): the origin sees each admitted request once, and
// the failure is reported as the origin's.
func TestNoSilentRetry(t *testing.T) {
	var arrivals atomic.Int64
	port, accepts := rawListener(t, dropsKeptAlive(&arrivals))
	e := newEnv(t, nil, withRule("drop.test::127.0.0.1:"+port))
	fake := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := limiter.New(fake)
	fake.Advance(time.Hour)
	u, _ := url.Parse("http://drop.test/")
	const iv = time.Second
	const rounds = 4
	for i := range rounds {
		adm, wait := l.Allow(fake.Now(), "drop.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
		if wait != 0 {
			t.Fatalf("round %d: not admitted (%v)", i, wait)
		}
		out := e.f.Fetch(context.Background(), u, &adm, e.admitter())
		adm.Cancel()
		// Rounds alternate: a new connection answers, the reused one drops the next.
		want := downloader.FailReason("")
		if i%2 == 1 {
			want = downloader.FailConnectionReset
		}
		if out.FailReason != want {
			t.Errorf("round %d: fail_reason %q, want %q", i, out.FailReason, want)
		}
		fake.Advance(iv)
	}
	if n := arrivals.Load(); n != rounds {
		t.Errorf("the origin received %d requests for %d admissions: a request was sent twice", n, rounds)
	}
	if n := accepts.Load(); n != rounds/2 {
		t.Errorf("%d connections for %d rounds, want %d", n, rounds, rounds/2)
	}
}

// TestWireTicket: one connection attempt and one first write per admission, nothing once
// the request is over, and a failed attempt spaces the next request from its start.
func TestWireTicket(t *testing.T) {
	fake := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := limiter.New(fake)
	fake.Advance(time.Hour)
	const iv = time.Second
	adm, _ := l.Allow(fake.Now(), "t.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
	tk := newWireTicket(context.Background(), &adm)
	if err := tk.Connecting(context.Background()); err != nil {
		t.Fatalf("first attempt: %v", err)
	}
	if err := tk.Connecting(context.Background()); err != errTicketUsed {
		t.Errorf("second attempt: %v, want errTicketUsed", err)
	}
	fake.Advance(50 * time.Millisecond)
	tk.Connected(io.ErrUnexpectedEOF) // the attempt failed: the hold ends at the attempt
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	go io.Copy(io.Discard, c2)
	if _, err := tk.write(c1, []byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatalf("first write: %v", err)
	}
	if _, err := tk.write(c1, []byte("GET / HTTP/1.1\r\n\r\n")); err != errTicketUsed {
		t.Errorf("second write: %v, want errTicketUsed", err)
	}
	if refused, werr := tk.finish(); werr != nil || refused != 2 {
		t.Errorf("finish = %v, %d; want nil, 2", werr, refused)
	}
	adm.Cancel()
	if _, wait := l.Allow(fake.Now(), "t.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe); wait != iv {
		t.Errorf("after the write: wait %v, want %v from the write", wait, iv)
	}

	// A dial that starts after its request ended is refused before any packet.
	fake.Advance(time.Hour)
	late, _ := l.Allow(fake.Now(), "late.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
	tk = newWireTicket(context.Background(), &late)
	tk.finish()
	if err := tk.Connecting(context.Background()); err != errTicketOver {
		t.Errorf("attempt after the end: %v, want errTicketOver", err)
	}
	late.Cancel()
	if _, wait := l.Allow(fake.Now(), "late.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe); wait != 0 {
		t.Errorf("nothing went out, yet the slot is spent: wait %v", wait)
	}
}

// TestBadLocationIsTheOriginsAnswer: a redirect whose Location is not a URL is the
// origin's bad answer, http_status_error with its 3xx status, not a network failure.
func TestBadLocationIsTheOriginsAnswer(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Location"] = []string{r.URL.Query().Get("loc")}
		w.WriteHeader(http.StatusFound)
	})
	e := newEnv(t, o)
	for _, loc := range []string{
		`http://127.1.1.1:80\@127.2.2.2:80/`,
		`http://[::1`,
		`%zz`,
		`http://a.test:port/`,
		"",
	} {
		t.Run(loc, func(t *testing.T) {
			out := e.fetch(context.Background(), "http://bad.test/?loc="+url.QueryEscape(loc))
			if out.FailReason != downloader.FailHTTPStatusError || out.HTTPStatus != http.StatusFound {
				t.Errorf("fail_reason %q http_status %d, want http_status_error 302", out.FailReason, out.HTTPStatus)
			}
		})
	}
}

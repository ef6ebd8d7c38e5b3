package egressproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/egressproxy"
	"downloader/fetch"
	"downloader/internal/proxytest"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/origintest"
)

// recordingOrigin is a real origin on 127.0.0.1 (plain or TLS) that records each
// request's Host and TLS server name.
type recordingOrigin struct {
	srv  *httptest.Server
	port string

	mu   sync.Mutex
	seen []string // "host sni path"
}

func newRecordingOrigin(t testing.TB, useTLS bool) *recordingOrigin {
	o := &recordingOrigin{}
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sni := "-"
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		o.mu.Lock()
		o.seen = append(o.seen, r.Host+" "+sni+" "+r.URL.Path)
		o.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><p>hello from %s</p>", r.Host)
	}))
	o.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if useTLS {
		o.srv.StartTLS()
	} else {
		o.srv.Start()
	}
	t.Cleanup(o.srv.Close)
	_, o.port, _ = net.SplitHostPort(o.srv.Listener.Addr().String())
	return o
}

func (o *recordingOrigin) requests() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// TestFetchThroughProxy: a plain and an HTTPS fetch through each real proxy reach the
// origin with the canonical host in the Host header and as the TLS server name, and
// every connection the fetcher made went to the proxy.
func TestFetchThroughProxy(t *testing.T) {
	plain := newRecordingOrigin(t, false)
	secure := newRecordingOrigin(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(secure.srv.Certificate())
	for _, pk := range proxyKinds {
		t.Run(pk.name, func(t *testing.T) {
			proxyURL, creds := pk.start(t)
			guard, pd := guardThrough(t, proxyURL, creds, []string{
				"site.test:80:127.0.0.1:" + plain.port,
				"example.com:443:127.0.0.1:" + secure.port, // the test certificate's name
			}, nil)
			f := fetch.New(fetch.Config{Guard: guard, TLSConfig: &tls.Config{RootCAs: roots}})
			defer f.Close()
			for _, tc := range []struct{ url, want string }{
				{"http://site.test/a", "site.test - /a"},
				{"https://example.com/b", "example.com example.com /b"},
			} {
				before := pd.count.Load()
				out := f.Fetch(t.Context(), mustURL(tc.url), nil, nil)
				if out.FailReason != "" || out.HTTPStatus != 200 {
					t.Fatalf("%s: fail_reason=%q http_status=%d cause=%v", tc.url, out.FailReason, out.HTTPStatus, out.Cause)
				}
				if !bytes.Contains(out.Body, []byte("hello from")) {
					t.Errorf("%s: body %q", tc.url, out.Body)
				}
				if pd.count.Load() == before {
					t.Errorf("%s: no connection to the proxy", tc.url)
				}
			}
			got := strings.Join(append(plain.requests(), secure.requests()...), "\n")
			for _, want := range []string{"site.test - /a", "example.com example.com /b"} {
				if !strings.Contains(got, want) {
					t.Errorf("the origins saw:\n%s\nwant a request %q", got, want)
				}
			}
		})
	}
}

// TestProxyAnswers is the mapping of docs/egress-proxy.md against the real proxies: each
// answer's cause, whether the slot was spent (the guard's connect hook told, at the
// connect request) and has_reached_origin.
func TestProxyAnswers(t *testing.T) {
	origin := newRecordingOrigin(t, false)
	squid := proxytest.Squid(t, proxytest.SquidOptions{})
	squidAuth := proxytest.Squid(t, proxytest.SquidOptions{Username: testUser, Password: testPassword})
	dante := proxytest.Dante(t)
	down := closedPort(t)
	refusing := closedPort(t) // the target nothing listens on
	good := mustCreds(t, testUser+":"+testPassword)
	tests := []struct {
		name       string
		proxy      string
		creds      egressproxy.Credentials
		target     string
		want       downloader.Cause
		isSpent    bool
		hasReached bool
	}{
		{"http proxy down", "http://" + down, egressproxy.Credentials{}, origin.srv.Listener.Addr().String(), downloader.CauseEgressProxyFailed, false, false},
		{"socks5 proxy down", "socks5://" + down, egressproxy.Credentials{}, origin.srv.Listener.Addr().String(), downloader.CauseEgressProxyFailed, false, false},
		{"squid 407 without credentials", squidAuth.URL, egressproxy.Credentials{}, origin.srv.Listener.Addr().String(), downloader.CauseEgressProxyFailed, true, false},
		{"squid 407 wrong password", squidAuth.URL, mustCreds(t, testUser+":wrong"), origin.srv.Listener.Addr().String(), downloader.CauseEgressProxyFailed, true, false},
		{"squid with credentials", squidAuth.URL, good, origin.srv.Listener.Addr().String(), downloader.CauseOK, true, true},
		{"squid 503 target refused", squid.URL, egressproxy.Credentials{}, refusing, downloader.CauseConnectRefused, true, true},
		{"dante reply 5 target refused", dante.URL, egressproxy.Credentials{}, refusing, downloader.CauseConnectRefused, true, true},
		{"dante with credentials it did not ask for", dante.URL, good, origin.srv.Listener.Addr().String(), downloader.CauseEgressProxyFailed, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			guard, _ := guardThrough(t, tt.proxy, tt.creds, []string{"target.test:80:" + tt.target}, nil)
			h := &hookCounter{}
			ctx, cancel := context.WithTimeout(netguard.WithConnectHook(t.Context(), h), 10*time.Second)
			defer cancel()
			c, err := guard.DialContext(ctx, "tcp", "target.test:80")
			if c != nil {
				c.Close()
			}
			if got := fetch.Classify(err); got != tt.want {
				t.Errorf("cause %v (err %v), want %v", got, err, tt.want)
			}
			connecting, connected := h.counts()
			if isSpent := connecting == 1; isSpent != tt.isSpent || connected != connecting {
				t.Errorf("connect hook told %d attempts, %d ends; want spent=%v (one attempt, one end)", connecting, connected, tt.isSpent)
			}
			// End to end: the fetcher's outcome says the same.
			f := fetch.New(fetch.Config{Guard: guard})
			defer f.Close()
			out := f.Fetch(t.Context(), mustURL("http://target.test/"), nil, nil)
			if out.Cause != tt.want && !(tt.want == downloader.CauseOK && out.Cause == downloader.CauseOK) {
				t.Errorf("fetch: cause %v, want %v", out.Cause, tt.want)
			}
			if got := out.FailReason.HasReachedOrigin(); got != tt.hasReached {
				t.Errorf("fetch: fail_reason %q has_reached_origin=%v, want %v", out.FailReason, got, tt.hasReached)
			}
		})
	}
}

// scriptedProxy answers every connection with answer after reading the client's first
// request (a CONNECT's headers, or a SOCKS5 greeting then request): the answers no real
// proxy gives on loopback on demand (a gateway timeout, each SOCKS5 reply code).
func scriptedProxy(t testing.TB, socks bool, reply []byte) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				if socks {
					var g [3]byte
					io.ReadFull(br, g[:])
					c.Write([]byte{5, 0})
					var req [10]byte // version, cmd, rsv, atyp 1, 4 bytes, port
					io.ReadFull(br, req[:])
				} else {
					http.ReadRequest(br)
				}
				c.Write(reply)
			})
		}
	})
	return ln.Addr().String()
}

// TestAnswerMapping: every row of the mapping that the real proxies cannot be made to
// give on loopback, against a scripted peer on 127.0.0.1.
func TestAnswerMapping(t *testing.T) {
	httpAnswer := func(status string) []byte { return []byte("HTTP/1.1 " + status + "\r\nContent-Length: 0\r\n\r\n") }
	socksReply := func(code byte) []byte { return []byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0} }
	tests := []struct {
		name  string
		socks bool
		reply []byte
		want  downloader.Cause
	}{
		{"CONNECT 502", false, httpAnswer("502 Bad Gateway"), downloader.CauseConnectRefused},
		{"CONNECT 503", false, httpAnswer("503 Service Unavailable"), downloader.CauseConnectRefused},
		{"CONNECT 504", false, httpAnswer("504 Gateway Timeout"), downloader.CauseConnectTimeout},
		{"CONNECT 403", false, httpAnswer("403 Forbidden"), downloader.CauseEgressProxyFailed},
		{"CONNECT 407", false, httpAnswer("407 Proxy Authentication Required"), downloader.CauseEgressProxyFailed},
		{"CONNECT 500", false, httpAnswer("500 Internal Server Error"), downloader.CauseEgressProxyFailed},
		{"CONNECT garbage", false, []byte("SSH-2.0-nope\r\n"), downloader.CauseEgressProxyFailed},
		{"SOCKS5 1 general failure", true, socksReply(1), downloader.CauseEgressProxyFailed},
		{"SOCKS5 2 not allowed", true, socksReply(2), downloader.CauseEgressProxyFailed},
		{"SOCKS5 3 network unreachable", true, socksReply(3), downloader.CauseConnectTimeout},
		{"SOCKS5 4 host unreachable", true, socksReply(4), downloader.CauseConnectTimeout},
		{"SOCKS5 5 connection refused", true, socksReply(5), downloader.CauseConnectRefused},
		{"SOCKS5 6 TTL expired", true, socksReply(6), downloader.CauseConnectTimeout},
		{"SOCKS5 7 command not supported", true, socksReply(7), downloader.CauseEgressProxyFailed},
		{"SOCKS5 8 address type not supported", true, socksReply(8), downloader.CauseEgressProxyFailed},
		{"SOCKS5 closed without a reply", true, nil, downloader.CauseEgressProxyFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scheme := "http://"
			if tt.socks {
				scheme = "socks5://"
			}
			guard, _ := guardThrough(t, scheme+scriptedProxy(t, tt.socks, tt.reply), egressproxy.Credentials{},
				[]string{"target.test:80:127.0.0.1:9"}, nil)
			h := &hookCounter{}
			ctx, cancel := context.WithTimeout(netguard.WithConnectHook(t.Context(), h), 10*time.Second)
			defer cancel()
			_, err := guard.DialContext(ctx, "tcp", "target.test:80")
			if got := fetch.Classify(err); got != tt.want {
				t.Errorf("cause %v (err %v), want %v", got, err, tt.want)
			}
			if got := downloader.FailedBy(tt.want).FailReason.HasReachedOrigin(); got != (tt.want != downloader.CauseEgressProxyFailed) {
				t.Errorf("has_reached_origin=%v for %v", got, tt.want)
			}
			if connecting, _ := h.counts(); connecting != 1 {
				t.Errorf("connect hook told %d attempts, want 1: the connect request went out", connecting)
			}
		})
	}
}

// TestGuardDecidesOnTheTarget: a name that resolves to a forbidden address is refused
// before anything is sent to the proxy; an allowed name is asked of the proxy by the
// address the guard checked, never by the name.
func TestGuardDecidesOnTheTarget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		accepted int
		lines    []string
		wg       sync.WaitGroup
	)
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				line, _ := bufio.NewReader(c).ReadString('\n')
				mu.Lock()
				lines = append(lines, strings.TrimSpace(line))
				mu.Unlock()
				c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"))
			})
		}
	})
	answers := map[string][]netip.Addr{
		"private.test":  {netip.MustParseAddr("10.1.2.3")},
		"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		"mixed.test":    {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("127.0.0.1")},
		"public.test":   {netip.MustParseAddr("93.184.215.14")},
	}
	guard, _ := guardThrough(t, "http://"+ln.Addr().String(), egressproxy.Credentials{}, nil, answers)
	f := fetch.New(fetch.Config{Guard: guard})
	defer f.Close()
	for _, u := range []string{"http://private.test/", "http://metadata.test/", "http://mixed.test/", "http://127.0.0.1/", "http://[::1]/"} {
		out := f.Fetch(t.Context(), mustURL(u), nil, nil)
		if out.FailReason != downloader.FailDestinationForbidden {
			t.Errorf("%s: fail_reason %q, want destination_forbidden", u, out.FailReason)
		}
	}
	mu.Lock()
	n := accepted
	mu.Unlock()
	if n != 0 {
		t.Fatalf("the proxy accepted %d connections for forbidden targets, want 0", n)
	}
	// An allowed name: the proxy is asked for the checked address (and says it could
	// not connect: no packet leaves loopback).
	out := f.Fetch(t.Context(), mustURL("http://public.test/"), nil, nil)
	if out.Cause != downloader.CauseConnectRefused {
		t.Errorf("public.test: cause %v, want connect_refused (the proxy's 503)", out.Cause)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 1 || lines[0] != "CONNECT 93.184.215.14:80 HTTP/1.1" {
		t.Errorf("the proxy was asked %q, want one CONNECT 93.184.215.14:80", lines)
	}
}

// TestCredentialsNeverShown: the password appears in no log line, no error and no
// formatting of the credentials, whatever the proxy answers.
func TestCredentialsNeverShown(t *testing.T) {
	squid := proxytest.Squid(t, proxytest.SquidOptions{Username: testUser, Password: testPassword})
	origin := newRecordingOrigin(t, false)
	var logs bytes.Buffer
	var lmu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&lmu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	creds := mustCreds(t, testUser+":"+testPassword)
	wrong := mustCreds(t, testUser+":"+testPassword+"-x")
	var texts []string
	for _, c := range []egressproxy.Credentials{creds, wrong} {
		for _, proxy := range []string{squid.URL, "socks5://" + closedPort(t), "http://" + closedPort(t)} {
			guard, _ := guardThrough(t, proxy, c, []string{"site.test:80:127.0.0.1:" + origin.port}, nil)
			f := fetch.New(fetch.Config{Guard: guard, Logger: logger})
			out := f.Fetch(t.Context(), mustURL("http://site.test/"), nil, nil)
			f.Close()
			texts = append(texts, fmt.Sprintf("%+v", out))
			_, err := guard.DialContext(t.Context(), "tcp", "site.test:80")
			if err != nil {
				texts = append(texts, err.Error(), fmt.Sprintf("%+v %#v", err, err))
			}
		}
		texts = append(texts, fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s %q", c, c, c, c, c))
		var b bytes.Buffer
		slog.New(slog.NewJSONHandler(&b, nil)).Info("x", "credentials", c, "config", egressproxy.Config{URL: squid.URL, Credentials: c})
		texts = append(texts, b.String())
	}
	lmu.Lock()
	texts = append(texts, logs.String())
	lmu.Unlock()
	for _, s := range texts {
		if strings.Contains(s, testPassword) {
			t.Errorf("the password shows in: %s", s)
		}
	}
	if _, _, err := egressproxy.ParseURL("http://" + testUser + ":" + testPassword + "@127.0.0.1:3128"); err == nil || strings.Contains(err.Error(), testPassword) {
		t.Errorf("a URL with credentials: err %v; want a refusal that does not quote them", err)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestPolitenessThroughProxy: requests of one domain admitted by the limiter and sent
// through each real proxy, at an origin with kernel receive times. What our gate controls
// is checked hard: the wire moments (our writes into the tunnel) are an interval apart.
// What the proxy adds is its relay delay (arrival minus wire moment):
// the origin's gap is the wire gap plus the difference of two relay delays, and it may be
// below the interval only by that difference (a proxy that holds one request longer than
// the next is outside any gate of ours; docs/egress-proxy.md). The raw gaps are logged.
func TestPolitenessThroughProxy(t *testing.T) {
	const (
		interval = 150 * time.Millisecond
		requests = 6
		workers  = 3
		slack    = 2 * time.Millisecond // clock readings on two sides of a loopback write
	)
	for _, pk := range proxyKinds {
		t.Run(pk.name, func(t *testing.T) {
			origin := origintest.New(nil)
			defer origin.Close()
			proxyURL, creds := pk.start(t)
			guard, _ := guardThrough(t, proxyURL, creds, []string{origin.ConnectTo()}, nil)
			f := fetch.New(fetch.Config{Guard: guard})
			defer f.Close()
			l := limiter.New(clock.Real{})
			var wmu sync.Mutex
			var wires []time.Time
			l.ObserveWire(func(_ string, _ time.Duration, at time.Time) {
				wmu.Lock()
				wires = append(wires, at)
				wmu.Unlock()
			})
			next := make(chan int, requests)
			for i := range requests {
				next <- i
			}
			close(next)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for i := range next {
						adm, err := l.Wait(t.Context(), "polite.test", interval, downloader.IntervalSourceRequest, downloader.EntryProbe)
						if err != nil {
							t.Error(err)
							return
						}
						var out *downloader.Outcome
						if i%2 == 0 {
							out = f.Fetch(t.Context(), mustURL(fmt.Sprintf("http://polite.test/%d", i)), &adm, nil)
						} else {
							out = f.FetchOnce(t.Context(), mustURL(fmt.Sprintf("http://polite.test/%d", i)), &adm, nil)
						}
						adm.Done()
						if out.FailReason != "" {
							t.Errorf("request %d: %q", i, out.FailReason)
						}
					}
				})
			}
			wg.Wait()
			if n := origin.UnstampedCount(); n != 0 {
				t.Errorf("%d arrivals without a kernel receive time", n)
			}
			var arrivals []time.Time
			for _, a := range origin.Arrivals() {
				arrivals = append(arrivals, a.At)
			}
			wmu.Lock()
			ws := append([]time.Time(nil), wires...)
			wmu.Unlock()
			if len(arrivals) != requests || len(ws) != requests {
				t.Fatalf("%d arrivals, %d wire moments; want %d of each", len(arrivals), len(ws), requests)
			}
			sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].Before(arrivals[j]) })
			sort.Slice(ws, func(i, j int) bool { return ws[i].Before(ws[j]) })
			minGap, maxRelay := time.Duration(1<<62), time.Duration(0)
			for i := range requests {
				relay := arrivals[i].Sub(ws[i].Round(0))
				maxRelay = max(maxRelay, relay) // negative when the clock was read after the write returned
				if i == 0 {
					continue
				}
				if wg := ws[i].Sub(ws[i-1]); wg < interval {
					t.Errorf("wire moments %d and %d are %v apart, want at least %v", i-1, i, wg, interval)
				}
				prevRelay := arrivals[i-1].Sub(ws[i-1].Round(0))
				gap := arrivals[i].Sub(arrivals[i-1])
				minGap = min(minGap, gap)
				if gap < interval-max(0, prevRelay-relay)-slack {
					t.Errorf("requests %d and %d arrived %v apart: below the interval %v by more than the proxy's relay delays differ (%v then %v)",
						i-1, i, gap, interval, prevRelay, relay)
				}
			}
			t.Logf("smallest gap at the origin %v (interval %v); largest relay delay (wire moment to arrival) %v", minGap, interval, maxRelay)
		})
	}
}

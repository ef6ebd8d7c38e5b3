package fetch

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"downloader"
	"downloader/internal/testca"
	"downloader/origintest"
)

// testLeaf is a certificate for *.example.com and 127.0.0.1 under a fresh test root.
func testLeaf(t testing.TB) (*testca.CA, *testca.Leaf) {
	t.Helper()
	ca, err := testca.New()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf("*.example.com", "example.com", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return ca, leaf
}

// newH2Origin is a Go HTTP/2 origin (net/http's server over TLS, ALPN h2 and
// http/1.1) recording each request's protocol, and an env whose fetcher trusts it.
func newH2Origin(t *testing.T, h http.HandlerFunc, opts ...envOption) (*origin, *env, *[]string) {
	t.Helper()
	ca, leaf := testLeaf(t)
	o := &origin{}
	var mu sync.Mutex
	var protos []string
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.Proto)
		o.requests = append(o.requests, hostOf(r)+r.URL.Path)
		mu.Unlock()
		h(w, r)
	}))
	o.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			o.accepts.Add(1)
		}
	}
	o.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	o.srv.EnableHTTP2 = true
	o.srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, NextProtos: []string{"h2", "http/1.1"}}
	o.srv.StartTLS()
	t.Cleanup(o.srv.Close)
	_, o.port, _ = net.SplitHostPort(o.srv.Listener.Addr().String())
	opts = append(opts, withRule("*.example.com::127.0.0.1:"+o.port),
		withConfig(func(c *Config) { c.TLSConfig = &tls.Config{RootCAs: ca.Pool()} }))
	e := newEnv(t, nil, opts...)
	return o, e, &protos
}

func versionOf(out *downloader.Outcome) string {
	if out.HealthSignal.HTTPVersion == nil {
		return "<nil>"
	}
	return *out.HealthSignal.HTTPVersion
}

// TestFetchHTTP2: ALPN picks h2 where the origin offers it, requests to one host share
// one connection (each a stream), http_version says so; with HTTP/2 off, and on plain
// http://, it is HTTP/1.1.
func TestFetchHTTP2(t *testing.T) {
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, okPage)
	}
	t.Run("h2", func(t *testing.T) {
		o, e, protos := newH2Origin(t, page)
		for range 3 {
			out := e.fetch(context.Background(), "https://www.example.com/")
			if out.FailReason != "" || out.HTTPStatus != 200 || versionOf(out) != "2" {
				t.Fatalf("fetch: fail_reason %q http_status %d http_version %s, want a 200 over HTTP/2",
					out.FailReason, out.HTTPStatus, versionOf(out))
			}
		}
		if n := o.accepts.Load(); n != 1 {
			t.Errorf("%d connections for 3 requests to one host, want 1 (one stream each)", n)
		}
		if got := strings.Join(*protos, ","); got != "HTTP/2.0,HTTP/2.0,HTTP/2.0" {
			t.Errorf("the origin saw %s", got)
		}
	})
	t.Run("off", func(t *testing.T) {
		_, e, protos := newH2Origin(t, page, withConfig(func(c *Config) { c.DisableHTTP2 = true }))
		out := e.fetch(context.Background(), "https://www.example.com/")
		if out.FailReason != "" || versionOf(out) != "1.1" {
			t.Fatalf("fetch: fail_reason %q http_version %s, want HTTP/1.1", out.FailReason, versionOf(out))
		}
		if got := strings.Join(*protos, ","); got != "HTTP/1.1" {
			t.Errorf("the origin saw %s", got)
		}
	})
	t.Run("plain http", func(t *testing.T) {
		e := newEnv(t, newOrigin(t, page))
		if out := e.fetch(context.Background(), "http://www.plain.test/"); versionOf(out) != "1.1" {
			t.Errorf("http_version %s over plain http, want 1.1", versionOf(out))
		}
	})
	t.Run("no answer", func(t *testing.T) {
		e := newEnv(t, nil, withRule("refused.test::127.0.0.1:"+closedPort(t)))
		if out := e.fetch(context.Background(), "https://refused.test/"); out.HealthSignal.HTTPVersion != nil {
			t.Errorf("http_version %s with no answer, want null", versionOf(out))
		}
	})
}

// TestFetch421: a 421 Misdirected Request over HTTP/2 is sent again once, on a new
// HTTP/1.1 connection, under an admission of its own (the request's HopAdmitter, like a
// redirect hop); without a HopAdmitter, and over HTTP/1.1, the 421 is the answer.
func TestFetch421(t *testing.T) {
	misdirect := func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			w.WriteHeader(http.StatusMisdirectedRequest)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, okPage)
	}
	o, e, protos := newH2Origin(t, misdirect)
	out := e.fetch(context.Background(), "https://www.example.com/")
	if out.FailReason != "" || out.HTTPStatus != 200 || versionOf(out) != "1.1" {
		t.Fatalf("after a 421: fail_reason %q http_status %d http_version %s, want a 200 over HTTP/1.1",
			out.FailReason, out.HTTPStatus, versionOf(out))
	}
	if out.HealthSignal.RedirectCount != 0 {
		t.Errorf("redirect_count %d: a 421's second send is not a redirect", out.HealthSignal.RedirectCount)
	}
	if got := e.hops.admitted(); len(got) != 1 || got[0] != "www.example.com" {
		t.Errorf("hop admissions %v, want one for the second send to www.example.com", got)
	}
	if got := strings.Join(*protos, ","); got != "HTTP/2.0,HTTP/1.1" {
		t.Errorf("the origin saw %s, want one HTTP/2 request then one HTTP/1.1", got)
	}
	if n := o.accepts.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the second send on a new HTTP/1.1 connection)", n)
	}

	// No HopAdmitter: no admission for a second send, so there is none.
	e.hops = nil
	if out := e.fetch(context.Background(), "https://www.example.com/"); out.HTTPStatus != 421 || out.FailReason != downloader.FailHTTPStatusError {
		t.Errorf("421 without hops: http_status %d fail_reason %q, want the 421 as the answer", out.HTTPStatus, out.FailReason)
	}

	// Over HTTP/1.1 a 421 is the answer.
	_, e1, protos1 := newH2Origin(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusMisdirectedRequest) },
		withConfig(func(c *Config) { c.DisableHTTP2 = true }))
	if out := e1.fetch(context.Background(), "https://www.example.com/"); out.HTTPStatus != 421 || len(*protos1) != 1 {
		t.Errorf("421 over HTTP/1.1: http_status %d after %d requests, want the 421 after one", out.HTTPStatus, len(*protos1))
	}
	if got := e1.hops.admitted(); len(got) != 0 {
		t.Errorf("hop admissions %v over HTTP/1.1, want none", got)
	}
}

// h2Behaviour is what the raw HTTP/2 origin does with a stream it receives.
type h2Behaviour int

const (
	h2Answer       h2Behaviour = iota // a 200 with a small page
	h2Refuse                          // RST_STREAM REFUSED_STREAM: the stream was not processed
	h2GoAway                          // GOAWAY with a last stream ID below it: not processed
	h2DropConn                        // close the TCP connection: lost before any answer
	h2NeverAnswers                    // nothing: the client's response timeout ends it
)

// rawH2Origin is an HTTP/2 server written with x/net's framer, so that it can refuse
// streams, send GOAWAY and drop connections exactly when a test needs: behave(conn,
// stream) says what to do with the stream-th HEADERS (from 1) of the conn-th connection
// (from 1). It counts connections and HEADERS frames (each one a request on the wire).
type rawH2Origin struct {
	behave  func(conn, stream int) h2Behaviour
	accepts atomic.Int64
	headers atomic.Int64

	mu       sync.Mutex
	arrivals []h2Arrival // stamped origins only (startStampedH2)
}

// h2Arrival is one HEADERS frame as a stamped origin saw it.
type h2Arrival struct {
	conn int
	at   time.Time // the kernel's receive time; zero: unstamped (see startStampedH2)
}

func startRawH2(t *testing.T, leaf *testca.Leaf, behave func(conn, stream int) h2Behaviour) (*rawH2Origin, string) {
	t.Helper()
	o := &rawH2Origin{behave: behave}
	port, _ := rawListener(t, func(c net.Conn) {
		n := int(o.accepts.Add(1))
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, NextProtos: []string{"h2"}})
		defer tc.Close()
		if err := tc.Handshake(); err != nil {
			return
		}
		o.serve(tc, nil, n)
	})
	return o, port
}

// startStampedH2 is startRawH2 on an origintest listener: each HEADERS frame is stamped
// with the kernel's receive time of the bytes it came in (origintest.ReceivedAt), claimed
// after each frame. A frame read from bytes that came in the same read as the frame before
// it (the server was slow to read, and the kernel merged the segments, keeping the later
// stamp) has no stamp of its own: it is left unstamped, never given another frame's time,
// as origintest does for HTTP/1.1.
func startStampedH2(t *testing.T, leaf *testca.Leaf, behave func(conn, stream int) h2Behaviour) (*rawH2Origin, string) {
	t.Helper()
	o := &rawH2Origin{behave: behave}
	ln, err := origintest.Listen()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(o.accepts.Add(1))
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, NextProtos: []string{"h2"}})
				defer tc.Close()
				if err := tc.Handshake(); err != nil {
					return
				}
				o.serve(tc, c, n)
			})
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
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return o, port
}

func (o *rawH2Origin) stamped() []h2Arrival {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]h2Arrival(nil), o.arrivals...)
}

// serve speaks HTTP/2 on c; raw, when not nil, is the stamped connection under it.
func (o *rawH2Origin) serve(c, raw net.Conn, conn int) {
	var last time.Time // the stamp claimed after the frame just read; zero: none
	claim := func() {
		last = time.Time{}
		if raw == nil {
			return
		}
		if at, ok := origintest.ReceivedAt(raw); ok {
			last = at
		}
	}
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return
	}
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	streams := 0
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		claim()
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			o.headers.Add(1)
			if raw != nil {
				o.mu.Lock()
				o.arrivals = append(o.arrivals, h2Arrival{conn: conn, at: last})
				o.mu.Unlock()
			}
			streams++
			id := f.StreamID
			switch o.behave(conn, streams) {
			case h2Answer:
				hbuf.Reset()
				enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
				enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "text/html"})
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true})
				fr.WriteData(id, true, []byte(okPage))
			case h2Refuse:
				fr.WriteRSTStream(id, http2.ErrCodeRefusedStream)
			case h2GoAway:
				// The client opened stream id; the server says it processed none of
				// them. A graceful GOAWAY (NO_ERROR) is the one a client retries.
				fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			case h2DropConn:
				return
			case h2NeverAnswers:
			}
		}
	}
}

// TestH2RetriesGoThroughTheGate: x/net's HTTP/2 transport retries a stream the server
// refused (REFUSED_STREAM), one a GOAWAY said was not processed, and net/http may retry
// after a connection lost before the answer. Ours never sends such a request again: the
// origin receives one HEADERS frame per fetch, the failure is reported
// (connection_reset), and the next fetch, under an admission of its own, is the next
// request (on the same connection after REFUSED_STREAM, on a new one after GOAWAY or a
// lost connection). Net/http's own HTTP/2 client is the control: against the same
// origin it does send the refused and unprocessed requests twice.
func TestH2RetriesGoThroughTheGate(t *testing.T) {
	ca, leaf := testLeaf(t)
	firstStreamOnly := func(b h2Behaviour) func(conn, stream int) h2Behaviour {
		return func(conn, stream int) h2Behaviour {
			if conn == 1 && stream == 1 {
				return b
			}
			return h2Answer
		}
	}
	cases := []struct {
		name           string
		behave         h2Behaviour
		wantReason     downloader.FailReason
		isConnKept     bool // the connection stays usable for the next fetch; else the next fetch dials
		controlRetries bool // net/http's own client sends the request again
	}{
		{"REFUSED_STREAM", h2Refuse, downloader.FailConnectionReset, true, true},
		{"GOAWAY before the stream was processed", h2GoAway, downloader.FailConnectionReset, false, true},
		{"connection lost before the answer", h2DropConn, downloader.FailConnectionReset, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, port := startRawH2(t, leaf, firstStreamOnly(tc.behave))
			var logs syncBuffer
			e := newEnv(t, nil, withRule("*.example.com::127.0.0.1:"+port), withConfig(func(c *Config) {
				c.TLSConfig = &tls.Config{RootCAs: ca.Pool()}
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			}))
			out := e.fetch(context.Background(), "https://www.example.com/")
			if out.FailReason != tc.wantReason {
				t.Errorf("first fetch: fail_reason %q, want %q", out.FailReason, tc.wantReason)
			}
			if n := o.headers.Load(); n != 1 {
				t.Fatalf("the origin received %d HEADERS for one fetch: the request was sent again without an admission", n)
			}
			if n := o.accepts.Load(); n != 1 {
				t.Errorf("%d connections after the first fetch, want 1: a retry dialled", n)
			}
			if tc.isConnKept {
				// A refused stream leaves its connection as it was: still ours, open, able
				// to take the next fetch's stream.
				if kept := e.f.h2.usableCount(); kept != 1 {
					t.Errorf("%d usable HTTP/2 connections after a refused stream, want 1", kept)
				}
			}
			if strings.Contains(logs.String(), "refused_count") {
				t.Logf("log: %s", logs.String())
			}
			// The next request is the next fetch's, under its own admission.
			out = e.fetch(context.Background(), "https://www.example.com/")
			if out.FailReason != "" || out.HTTPStatus != 200 || versionOf(out) != "2" {
				t.Errorf("second fetch: fail_reason %q http_status %d http_version %s", out.FailReason, out.HTTPStatus, versionOf(out))
			}
			if n := o.headers.Load(); n != 2 {
				t.Errorf("the origin received %d HEADERS for two fetches, want 2", n)
			}
			// After GOAWAY or a lost connection the next fetch dials. After a refused stream
			// it may take the kept connection or, when net/http's dial goroutine has not yet
			// put that shared connection in its idle pool (it does so after handing it to the
			// first request), dial: net/http's timing, not ours, so not asserted.
			if n := o.accepts.Load(); !tc.isConnKept && n != 2 {
				t.Errorf("%d connections after the second fetch, want 2", n)
			}

			// The control: net/http's HTTP/2 client against a fresh origin that behaves
			// the same.
			ctl, ctlPort := startRawH2(t, leaf, firstStreamOnly(tc.behave))
			tr := &http.Transport{
				TLSClientConfig:   &tls.Config{RootCAs: ca.Pool()},
				ForceAttemptHTTP2: true,
				DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, "127.0.0.1:"+ctlPort)
				},
			}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodGet, "https://www.example.com/", nil)
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
			if retried := ctl.headers.Load() > 1; retried != tc.controlRetries {
				t.Errorf("control: net/http's client sent %d HEADERS for one request; want a retry: %v",
					ctl.headers.Load(), tc.controlRetries)
			}
		})
	}
}

// TestH2NoHeadersInTime: a stream whose answer never comes ends at ResponseTimeout
// (net/http's ResponseHeaderTimeout covers HTTP/1.1 only) as response_timeout.
func TestH2NoHeadersInTime(t *testing.T) {
	ca, leaf := testLeaf(t)
	o, port := startRawH2(t, leaf, func(int, int) h2Behaviour { return h2NeverAnswers })
	e := newEnv(t, nil, withRule("*.example.com::127.0.0.1:"+port), withConfig(func(c *Config) {
		c.TLSConfig = &tls.Config{RootCAs: ca.Pool()}
		c.ResponseTimeout = 200 * time.Millisecond
	}))
	out := e.fetch(deadline(t, 10*time.Second), "https://www.example.com/")
	if out.FailReason != downloader.FailResponseTimeout {
		t.Errorf("fail_reason %q, want response_timeout", out.FailReason)
	}
	if n := o.headers.Load(); n != 1 {
		t.Errorf("the origin received %d HEADERS, want 1", n)
	}
}

// usableCount is how many of p's connections are open and able to take a new stream.
func (p *h2Pool) usableCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for cc := range p.conns {
		if cc.CanTakeNewRequest() {
			n++
		}
	}
	return n
}

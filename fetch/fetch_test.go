package fetch

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"golang.org/x/text/encoding/simplifiedchinese"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/limiter"
)

const okPage = `<!DOCTYPE html><html><head><title>Ignored</title><script>var x=1</script></head>
<body><h1>Hello</h1><p>visible   text</p></body></html>`

const okPageText = "Hello visible text"

func TestFetchOK(t *testing.T) {
	var gotUA, gotAE string
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		gotUA, gotAE = r.Header.Get("User-Agent"), r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, okPage)
	})
	e := newEnv(t, o, withConfig(func(c *Config) { c.UserAgent = "test-agent/1" }))
	out := e.fetch(context.Background(), "http://ok.test/page")
	if out.FailReason != "" || out.HTTPStatus != 200 {
		t.Fatalf("outcome = %+v, want a 200 success", out)
	}
	if out.RawTextLength == nil || *out.RawTextLength != len(okPageText) {
		t.Errorf("raw_text_length = %v, want %d", out.RawTextLength, len(okPageText))
	}
	if out.TextLength != nil {
		t.Errorf("text_length = %v, want nil for a plain fetch", *out.TextLength)
	}
	hs := out.HealthSignal
	if hs.BodyBytes != int64(len(okPage)) || hs.ContentType != "text/html; charset=utf-8" || hs.RedirectCount != 0 {
		t.Errorf("health_signal = %+v", hs)
	}
	if hs.XHRCount != nil || hs.XHRFailedCount != nil || hs.SubrequestCount != nil || hs.RetryAfterSeconds != nil {
		t.Errorf("render-only fields must be nil: %+v", hs)
	}
	if string(out.Body) != okPage || out.FinalURL != "http://ok.test/page" {
		t.Errorf("body %q, final_url %q", out.Body, out.FinalURL)
	}
	if gotUA != "test-agent/1" || gotAE != acceptEncoding {
		t.Errorf("sent User-Agent %q and Accept-Encoding %q", gotUA, gotAE)
	}
	if s := out.Summary("ok.test"); !s.HasReachedOrigin || s.FailReason != nil || *s.HTTPStatus != 200 {
		t.Errorf("summary = %+v", s)
	}
}

// TestFetchOnce: FetchOnce asks for Connection: close and keeps no connection for later,
// so each of its requests to one host dials anew; Fetch reuses the connection.
func TestFetchOnce(t *testing.T) {
	var mu sync.Mutex
	var closes []bool
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		closes = append(closes, r.Close)
		mu.Unlock()
		io.WriteString(w, okPage)
	})
	e := newEnv(t, o)
	for range 3 {
		if out := e.fetchWith(context.Background(), "http://once.test/", e.f.FetchOnce); out.HTTPStatus != 200 {
			t.Fatalf("FetchOnce: %+v", out)
		}
	}
	if n := o.accepts.Load(); n != 3 {
		t.Errorf("FetchOnce ×3: %d connections, want 3", n)
	}
	for range 3 {
		if out := e.fetch(context.Background(), "http://once.test/"); out.HTTPStatus != 200 {
			t.Fatalf("Fetch: %+v", out)
		}
	}
	if n := o.accepts.Load(); n != 4 {
		t.Errorf("then Fetch ×3: %d connections in all, want 4 (one kept for reuse)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []bool{true, true, true, false, false, false}
	if fmt.Sprint(closes) != fmt.Sprint(want) {
		t.Errorf("Connection: close seen %v, want %v", closes, want)
	}
}

func TestFetchTLS(t *testing.T) {
	o := newTLSOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, okPage)
	})
	roots := x509.NewCertPool()
	roots.AddCert(o.srv.Certificate())
	rule := "*.example.com::127.0.0.1:" + o.port
	trusted := newEnv(t, nil, withRule(rule), withConfig(func(c *Config) { c.TLSConfig = &tls.Config{RootCAs: roots} }))
	if out := trusted.fetch(context.Background(), "https://www.example.com/"); out.FailReason != "" || out.HTTPStatus != 200 {
		t.Errorf("trusted TLS: %+v", out)
	}
	untrusted := newEnv(t, nil, withRule(rule))
	if out := untrusted.fetch(context.Background(), "https://www.example.com/"); out.FailReason != downloader.FailTLSFailed {
		t.Errorf("untrusted certificate: fail_reason %q, want tls_failed", out.FailReason)
	}
}

// silentListener accepts connections and never writes a byte.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	return port
}

func hijack(w http.ResponseWriter) net.Conn {
	c, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	return c
}

func rst(c net.Conn) {
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
}

// TestFetchFailures classifies real failures on loopback listeners.
func TestFetchFailures(t *testing.T) {
	stop := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		host := hostOf(r)
		switch host {
		case "noheaders.test":
			<-stop
		case "stall.test":
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Length", "1000")
			io.WriteString(w, "<p>partial")
			w.(http.Flusher).Flush()
			<-stop
		case "reset.test":
			rst(hijack(w))
		case "resetbody.test":
			c := hijack(w)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1000\r\n\r\n<p>partial")
			rst(c)
		case "eof.test":
			hijack(w).Close()
		case "garbage.test":
			c := hijack(w)
			io.WriteString(c, "SPEAKING NONSENSE\r\n\r\n")
			c.Close()
		case "bad502.test":
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>")
		case "notfound.test":
			http.NotFound(w, r)
		case "ratelimited.test":
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			io.WriteString(w, okPage)
		}
	})
	releaseAtEnd(t, stop)
	silent := silentListener(t)
	e := newEnv(t, o,
		withRule("refused.test::127.0.0.1:"+closedPort(t)),
		withRule("silent.test::127.0.0.1:"+silent),
		withConfig(func(c *Config) {
			c.ResponseTimeout = 300 * time.Millisecond
			c.TLSTimeout = 300 * time.Millisecond
			c.ConnectTimeout = 300 * time.Millisecond
		}))

	tests := []struct {
		url        string
		want       downloader.FailReason
		wantStatus int // -1: either
	}{
		{"http://ok.test/", "", 200},
		{"http://refused.test/", downloader.FailConnectRefused, 0},
		{"http://noheaders.test/", downloader.FailResponseTimeout, 0},
		{"http://stall.test/", downloader.FailResponseTimeout, 200},
		{"http://reset.test/", downloader.FailConnectionReset, 0},
		{"http://resetbody.test/", downloader.FailConnectionReset, -1},
		{"http://eof.test/", downloader.FailConnectionReset, 0},
		{"http://garbage.test/", downloader.FailConnectionReset, 0},
		{"http://bad502.test/", downloader.FailHTTPStatusError, 502},
		{"http://notfound.test/", downloader.FailHTTPStatusError, 404},
		{"http://ratelimited.test/", downloader.FailHTTPStatusError, 429},
		{"https://ok.test/", downloader.FailTLSFailed, 0}, // TLS to a plain HTTP server
		{"https://silent.test/", downloader.FailTLSFailed, 0},
		{"http://blackhole.example/", downloader.FailConnectTimeout, 0},
		{"http://nx.example/", downloader.FailDomainNotFound, 0},
		{"http://servfail.example/", downloader.FailResolverUnavailable, 0},
		{"http://dnstimeout.example/", downloader.FailResolverUnavailable, 0},
		{"http://evil.example/", downloader.FailDestinationForbidden, 0},
		{"http://meta.example/", downloader.FailDestinationForbidden, 0},
		{"http://127.0.0.1:" + o.port + "/", downloader.FailDestinationForbidden, 0},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			out := e.fetch(context.Background(), tt.url)
			if out.FailReason != tt.want {
				t.Errorf("fail_reason = %q, want %q (outcome %+v)", out.FailReason, tt.want, out)
			}
			if tt.wantStatus >= 0 && out.HTTPStatus != tt.wantStatus {
				t.Errorf("http_status = %d, want %d", out.HTTPStatus, tt.wantStatus)
			}
			if got := out.RawTextLength != nil; got != (out.HTTPStatus != 0) {
				t.Errorf("raw_text_length set = %v with http_status %d", got, out.HTTPStatus)
			}
		})
	}
	if got := e.fetch(context.Background(), "http://bad502.test/"); got.RawTextLength == nil || *got.RawTextLength != len("502 Bad Gateway") {
		t.Errorf("a 502's body is still measured: raw_text_length = %v", got.RawTextLength)
	}
	if got := e.fetch(context.Background(), "http://ratelimited.test/"); got.HealthSignal.RetryAfterSeconds == nil || *got.HealthSignal.RetryAfterSeconds != 120 {
		t.Errorf("retry_after_seconds = %v, want 120", got.HealthSignal.RetryAfterSeconds)
	}
	for _, s := range o.seen() {
		if strings.HasPrefix(s, "127.0.0.1") {
			t.Errorf("a request named by a loopback literal reached the origin: %s", s)
		}
	}
}

// TestFetchCallerContext covers the caller's deadline and cancellation.
func TestFetchCallerContext(t *testing.T) {
	stop := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { <-stop })
	releaseAtEnd(t, stop)
	e := newEnv(t, o, withConfig(func(c *Config) {
		c.ConnectTimeout = time.Second // the black-holed dial outlives the caller's deadline
	}))

	if out := e.fetch(deadline(t, 100*time.Millisecond), "http://blackhole.example/"); out.FailReason != downloader.FailConnectTimeout {
		t.Errorf("deadline before a connection: %q, want connect_timeout", out.FailReason)
	}
	if out := e.fetch(deadline(t, 100*time.Millisecond), "http://slow.test/"); out.FailReason != downloader.FailResponseTimeout {
		t.Errorf("deadline after the connection: %q, want response_timeout", out.FailReason)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := e.fetch(ctx, "http://slow.test/")
	if out.FailReason != downloader.FailShuttingDown || out.FailReason.HasReachedOrigin() {
		t.Errorf("cancelled by the caller: %q, want shutting_down", out.FailReason)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", now.Add(90*time.Second+300*time.Millisecond).Format(http.TimeFormat))
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	e := newEnv(t, o, withConfig(func(c *Config) { c.Clock = clocktest.NewFake(now) }))
	out := e.fetch(context.Background(), "http://busy.test/")
	if out.HTTPStatus != 503 || out.HealthSignal.RetryAfterSeconds == nil || *out.HealthSignal.RetryAfterSeconds != 90 {
		t.Errorf("503 with an HTTP-date: status %d, retry_after_seconds %v; want 503, 90", out.HTTPStatus, out.HealthSignal.RetryAfterSeconds)
	}
	if out.HealthSignal.ElapsedMs != 0 {
		t.Errorf("elapsed_ms on a fake clock that did not move = %d", out.HealthSignal.ElapsedMs)
	}

	// The parser's own cases are in package retryafter.
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func brotliBytes(b []byte) []byte {
	var buf bytes.Buffer
	w := brotli.NewWriterLevel(&buf, brotli.BestSpeed)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func zlibBytes(b []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func flateBytes(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.DefaultCompression)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func TestFetchBodies(t *testing.T) {
	const maxBody = 256 << 10
	bomb := bytes.Repeat([]byte("a"), 4<<20) // 4 MiB of text, 16 times the cap, a few KiB compressed
	gzBomb, brBomb := gzipBytes(bomb), brotliBytes(bomb)
	gbk, err := simplifiedchinese.GBK.NewEncoder().Bytes([]byte(`<html><head><meta charset="gbk"></head><body><p>中文内容</p></body></html>`))
	if err != nil {
		t.Fatal(err)
	}
	type body struct {
		ct, ce string
		data   []byte
	}
	bodies := map[string]body{
		"/gzip":        {"text/html", "gzip", gzipBytes([]byte(okPage))},
		"/br":          {"text/html", "br", brotliBytes([]byte(okPage))},
		"/deflate":     {"text/html", "deflate", zlibBytes([]byte(okPage))},
		"/rawdeflate":  {"text/html", "deflate", flateBytes([]byte(okPage))},
		"/chain":       {"text/html", "gzip, br", brotliBytes(gzipBytes([]byte(okPage)))},
		"/gzipbomb":    {"text/plain", "gzip", gzBomb},
		"/brbomb":      {"text/plain", "br", brBomb},
		"/big":         {"text/plain", "", bomb[:2*maxBody]},
		"/gbk":         {"text/html", "", gbk},
		"/gbk-header":  {"text/html; charset=GBK", "", gbk},
		"/gbk-sniffed": {"", "", gbk}, // the sniffer's charset=utf-8 must not outrank the <meta>
		"/utf8-nodecl": {"text/html", "", []byte("<p>" + strings.Repeat("x", 2000) + "中文</p>")},
		"/plain":       {"text/plain; charset=utf-8", "", []byte("  plain \n\n text  ")},
		"/json":        {"application/json", "", []byte(`{"a": "b"}`)},
		"/sniffed":     {"", "", []byte(okPage)},
		"/unknown":     {"text/html", "compress", []byte("whatever")}, // a coding we do not decode
		"/corrupt":     {"text/html", "gzip", []byte("not gzip at all")},
	}
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		b, ok := bodies[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if b.ct != "" {
			w.Header().Set("Content-Type", b.ct)
		} else {
			w.Header()["Content-Type"] = nil // no sniffing by the server
		}
		if b.ce != "" {
			w.Header().Set("Content-Encoding", b.ce)
		}
		w.Write(b.data)
	})
	e := newEnv(t, o, withConfig(func(c *Config) { c.MaxBodyBytes = maxBody }))
	tests := []struct {
		path      string
		bodyBytes int64
		textLen   int
	}{
		{"/gzip", int64(len(okPage)), len(okPageText)},
		{"/br", int64(len(okPage)), len(okPageText)},
		{"/deflate", int64(len(okPage)), len(okPageText)},
		{"/rawdeflate", int64(len(okPage)), len(okPageText)},
		{"/chain", int64(len(okPage)), len(okPageText)},
		{"/gzipbomb", maxBody, maxBody},
		{"/brbomb", maxBody, maxBody},
		{"/big", maxBody, maxBody},
		{"/gbk", int64(len(gbk)), 4},
		{"/gbk-header", int64(len(gbk)), 4},
		{"/gbk-sniffed", int64(len(gbk)), 4},
		{"/utf8-nodecl", 3 + 2000 + 6 + 4, 2002},
		{"/plain", 17, 10},
		{"/json", 10, 0},
		{"/sniffed", int64(len(okPage)), len(okPageText)},
		{"/unknown", 8, 0},
		{"/corrupt", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			out := e.fetch(context.Background(), "http://bodies.test"+tt.path)
			if out.FailReason != "" || out.HTTPStatus != 200 {
				t.Fatalf("outcome %q %d, want a 200 success", out.FailReason, out.HTTPStatus)
			}
			if out.HealthSignal.BodyBytes != tt.bodyBytes || int64(len(out.Body)) != tt.bodyBytes {
				t.Errorf("body_bytes = %d (len %d), want %d", out.HealthSignal.BodyBytes, len(out.Body), tt.bodyBytes)
			}
			if want := tt.bodyBytes == maxBody; out.HealthSignal.IsBodyTruncated != want {
				t.Errorf("is_body_truncated = %v, want %v", out.HealthSignal.IsBodyTruncated, want)
			}
			if out.RawTextLength == nil || *out.RawTextLength != tt.textLen {
				t.Errorf("raw_text_length = %v, want %d", out.RawTextLength, tt.textLen)
			}
		})
	}
	if out := e.fetch(context.Background(), "http://bodies.test/sniffed"); !strings.HasPrefix(out.HealthSignal.ContentType, "text/html") {
		t.Errorf("sniffed content_type = %q", out.HealthSignal.ContentType)
	}
}

// redirectOrigin serves redirect chains on many virtual hosts.
func redirectOrigin(t *testing.T) *origin {
	var o *origin
	o = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		host := hostOf(r)
		p := r.URL.Path
		redirect := func(code int, loc string) {
			w.Header().Set("Location", loc)
			w.WriteHeader(code)
			io.WriteString(w, "<p>moved</p>")
		}
		switch {
		case p == "/r1":
			redirect(http.StatusFound, "/r2")
		case p == "/r2":
			redirect(http.StatusMovedPermanently, "http://b.test/r3#fragment")
		case p == "/r3" && host == "b.test":
			io.WriteString(w, "<p>done</p>")
		case strings.HasPrefix(p, "/n/"): // /n/{k}/{limit}: redirect until k == limit
			var k, limit int
			fmt.Sscanf(p, "/n/%d/%d", &k, &limit)
			if k < limit {
				redirect(http.StatusTemporaryRedirect, fmt.Sprintf("http://h%d.test/n/%d/%d", k+1, k+1, limit))
				return
			}
			io.WriteString(w, "<p>arrived</p>")
		case p == "/to":
			redirect(http.StatusFound, strings.ReplaceAll(r.URL.Query().Get("loc"), "PORT", o.port))
		case p == "/no-location":
			w.WriteHeader(http.StatusFound)
		default:
			io.WriteString(w, "<p>ok</p>")
		}
	})
	return o
}

func TestRedirects(t *testing.T) {
	o := redirectOrigin(t)
	e := newEnv(t, o)

	out := e.fetch(context.Background(), "http://a.test/r1")
	if out.FailReason != "" || out.HTTPStatus != 200 || out.FinalURL != "http://b.test/r3" || out.HealthSignal.RedirectCount != 2 {
		t.Errorf("chain: %q %d %s redirect_count %d", out.FailReason, out.HTTPStatus, out.FinalURL, out.HealthSignal.RedirectCount)
	}
	// Every hop is admitted, the same host too.
	if got := strings.Join(e.hops.admitted(), ","); got != "a.test,b.test" {
		t.Errorf("hops admitted: %s, want a.test,b.test", got)
	}

	e.hops.domains = nil
	out = e.fetch(context.Background(), "http://h0.test/n/0/5")
	if out.FailReason != "" || out.HealthSignal.RedirectCount != 5 || out.FinalURL != "http://h5.test/n/5/5" {
		t.Errorf("five redirects: %q redirect_count %d final %s", out.FailReason, out.HealthSignal.RedirectCount, out.FinalURL)
	}
	if n := len(e.hops.admitted()); n != 5 {
		t.Errorf("five redirects admitted %d hops", n)
	}

	e.hops.domains = nil
	out = e.fetch(context.Background(), "http://h0.test/n/0/6")
	if out.FailReason != downloader.FailHTTPStatusError || out.HTTPStatus != http.StatusTemporaryRedirect || out.HealthSignal.RedirectCount != 5 {
		t.Errorf("six redirects: %q %d redirect_count %d; want http_status_error 307 after 5", out.FailReason, out.HTTPStatus, out.HealthSignal.RedirectCount)
	}
	if n := len(e.hops.admitted()); n != 5 {
		t.Errorf("six redirects admitted %d hops, want 5", n)
	}
	if seen := o.seen(); strings.Contains(strings.Join(seen, " "), "h6.test") {
		t.Errorf("the sixth hop was sent: %v", seen)
	}

	for _, tt := range []struct{ loc, want string }{
		{"ftp://a.test/", string(downloader.FailHTTPStatusError)},
		{"/relative", ""},
	} {
		out := e.fetch(context.Background(), "http://a.test/to?loc="+url.QueryEscape(tt.loc))
		if string(out.FailReason) != tt.want {
			t.Errorf("redirect to %s: %q, want %q", tt.loc, out.FailReason, tt.want)
		}
	}
	if out := e.fetch(context.Background(), "http://a.test/no-location"); out.FailReason != downloader.FailHTTPStatusError || out.HTTPStatus != 302 {
		t.Errorf("302 without Location: %q %d", out.FailReason, out.HTTPStatus)
	}

	// Without a HopAdmitter nothing is followed.
	noHops := newEnv(t, o)
	noHops.hops = nil
	if out := noHops.fetch(context.Background(), "http://a.test/r1"); out.HTTPStatus != 302 || out.FailReason != downloader.FailHTTPStatusError {
		t.Errorf("no HopAdmitter: %q %d, want the 302 as the answer", out.FailReason, out.HTTPStatus)
	}

	// A hop that cannot be admitted in time is our own limit.
	refusing := newEnv(t, o)
	refusing.hops.err = fmt.Errorf("wait: %w", context.DeadlineExceeded)
	out = refusing.fetch(context.Background(), "http://a.test/r1")
	if out.FailReason != downloader.FailSelfRateLimited || out.FailReason.HasReachedOrigin() {
		t.Errorf("hop not admitted: %q, want self_rate_limited", out.FailReason)
	}
	if out.HTTPStatus != 0 || out.FinalURL != "http://a.test/r2" {
		t.Errorf("hop not admitted: status %d final %s", out.HTTPStatus, out.FinalURL)
	}
	// A hop whose shared admission failed (cluster mode, TiKV unreachable) was not sent
	// for a reason of the store's, not the limit's.
	refusing.hops.err = fmt.Errorf("admit redirect hop: %w", errors.Join(
		downloader.Errorf(downloader.EUNAVAILABLE, "the shared limiter state is unavailable"), errors.New("tikv down (test)")))
	out = refusing.fetch(context.Background(), "http://a.test/r1")
	if out.FailReason != downloader.FailRuntimeStoreUnavailable || out.FailReason.HasReachedOrigin() || out.HTTPStatus != 0 {
		t.Errorf("hop's shared admission failed: %q (status %d), want runtime_store_unavailable", out.FailReason, out.HTTPStatus)
	}
}

func TestHopRefusalReason(t *testing.T) {
	unavailable := downloader.Errorf(downloader.EUNAVAILABLE, "store down")
	tests := []struct {
		err  error
		want downloader.FailReason
	}{
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), downloader.FailSelfRateLimited},
		{fmt.Errorf("wait: %w", context.Canceled), downloader.FailShuttingDown},
		{fmt.Errorf("shared: %w", unavailable), downloader.FailRuntimeStoreUnavailable},
		{fmt.Errorf("shared: %w", errors.Join(unavailable, context.DeadlineExceeded)), downloader.FailRuntimeStoreUnavailable},
		{downloader.Errorf(downloader.EINTERNAL, "bug"), downloader.FailSelfRateLimited},
	}
	for _, tt := range tests {
		if got := hopRefusalCause(tt.err).FailReason(); got != tt.want {
			t.Errorf("hopRefusalCause(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestRedirectForbidden: a redirect to a loopback address, named in any form, is refused
// before any connection is made.
func TestRedirectForbidden(t *testing.T) {
	o := redirectOrigin(t)
	e := newEnv(t, o)
	for _, loc := range []string{
		"http://127.0.0.1:PORT/",
		"http://localhost:PORT/",
		"http://LocalHost.:PORT/",
		"http://app.localhost:PORT/",
		"http://[::1]:PORT/",
		"http://[::ffff:127.0.0.1]:PORT/",
		"http://2130706433:PORT/",
		"http://0x7f.1:PORT/",
		"http://evil.example:PORT/", // resolves to 127.0.0.1
		"http://169.254.169.254/latest/meta-data/",
		"http://meta.example/", // resolves to 169.254.169.254
		"http://10.0.0.1/",
	} {
		before := o.accepts.Load()
		requests := len(o.seen())
		e.hops.domains = nil
		out := e.fetch(context.Background(), "http://a.test/to?loc="+url.QueryEscape(loc))
		if out.FailReason != downloader.FailDestinationForbidden || !out.FailReason.HasReachedOrigin() {
			t.Errorf("redirect to %s: %q, want destination_forbidden", loc, out.FailReason)
		}
		if out.HTTPStatus != 0 || out.HealthSignal.RedirectCount != 1 {
			t.Errorf("redirect to %s: status %d redirect_count %d", loc, out.HTTPStatus, out.HealthSignal.RedirectCount)
		}
		// The first request may open one connection; the forbidden hop opens none.
		if n := o.accepts.Load() - before; n > 1 {
			t.Errorf("redirect to %s: %d connections accepted, want at most 1 (the first hop's)", loc, n)
		}
		if n := len(o.seen()) - requests; n != 1 {
			t.Errorf("redirect to %s: %d requests reached the origin, want 1", loc, n)
		}
	}
}

// TestWireMoment: each hop's request goes on the wire after its connection is established
// and its admission taken (its hop is admitted before its bytes are written), and before
// the origin sees it; once per hop. The test dialer sees the bytes go out.
func TestWireMoment(t *testing.T) {
	o := redirectOrigin(t)
	type call struct {
		hop        int
		remote     string
		seenBefore int
		conn       net.Conn
	}
	var (
		mu    sync.Mutex
		calls []call
		e     *env
	)
	e = newEnv(t, o, withWriteWatch(func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, call{len(e.hops.admitted()), c.RemoteAddr().String(), len(o.seen()), c})
	}))
	out := e.fetch(context.Background(), "http://a.test/r1")
	if out.FailReason != "" {
		t.Fatalf("fetch: %q", out.FailReason)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 3 {
		t.Fatalf("%d writes, want 3 (one per hop): %+v", len(calls), calls)
	}
	for i, c := range calls {
		if c.hop != i {
			t.Errorf("write %d is for hop %d", i, c.hop)
		}
		if c.remote != "127.0.0.1:"+o.port {
			t.Errorf("hop %d: connection to %s, want the origin", i, c.remote)
		}
		if c.seenBefore != i {
			t.Errorf("hop %d: the origin had seen %d requests at the wire moment, want %d", i, c.seenBefore, i)
		}
	}
	t.Logf("connection reused by hops 1 and 2: %v %v", calls[1].conn == calls[0].conn, calls[2].conn == calls[1].conn)
}

// TestWireWait: the request leaves only when the limiter lets it, after the connection is
// made; a wait that outlives the caller's deadline sends nothing.
func TestWireWait(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<p>x</p>") })
	e := newEnv(t, o)
	fake := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := limiter.New(fake)
	fake.Advance(time.Second)
	const interval = 100 * time.Millisecond
	u, _ := url.Parse("http://w.test/")

	// adm is admitted first, but before it reaches the wire another request to the domain
	// is admitted to go out at once: adm must then wait until an interval after that one.
	adm, _ := l.Allow(fake.Now(), "w.test", interval, downloader.IntervalSourceRequest, downloader.EntryProbe)
	fake.Advance(interval)
	other, _ := l.Allow(fake.Now(), "w.test", interval, downloader.IntervalSourceRequest, downloader.EntryProbe)
	if !adm.Admitted() || !other.Admitted() {
		t.Fatal("setup: not admitted")
	}
	done := make(chan *downloader.Outcome)
	go func() { done <- e.f.Fetch(context.Background(), u, &adm, e.admitter()) }()
	waiting := make(chan struct{})
	go func() { fake.WaitTimers(1); close(waiting) }()
	select {
	case <-waiting: // Fetch is connected and waiting on the wire
	case out := <-done:
		fake.Advance(time.Hour) // let the helper goroutine go
		t.Fatalf("Fetch returned without waiting on the wire: %+v", out)
	}
	if n := len(o.seen()); n != 0 {
		t.Fatalf("%d requests reached the origin during the wire wait", n)
	}
	fake.Advance(interval)
	out := <-done
	adm.Cancel()
	other.Cancel()
	if out.FailReason != "" || len(o.seen()) != 1 {
		t.Errorf("after the wait: %q with %d requests, want success and 1", out.FailReason, len(o.seen()))
	}

	// Same again, but the caller's deadline ends during the wait.
	fake.Advance(time.Second)
	adm, _ = l.Allow(fake.Now(), "w.test", interval, downloader.IntervalSourceRequest, downloader.EntryProbe)
	fake.Advance(interval)
	other, _ = l.Allow(fake.Now(), "w.test", interval, downloader.IntervalSourceRequest, downloader.EntryProbe)
	out = e.f.Fetch(deadline(t, 200*time.Millisecond), u, &adm, e.admitter())
	adm.Cancel()
	other.Cancel()
	if out.FailReason != downloader.FailSelfRateLimited || out.FailReason.HasReachedOrigin() {
		t.Errorf("deadline during the wire wait: %q, want self_rate_limited", out.FailReason)
	}
	if n := len(o.seen()); n != 1 {
		t.Errorf("%d requests reached the origin, want still 1", n)
	}
}

func TestClassify(t *testing.T) {
	opErr := func(op string, err error) error { return &net.OpError{Op: op, Net: "tcp", Err: err} }
	tests := []struct {
		err  error
		want downloader.FailReason
	}{
		{nil, ""},
		{&net.DNSError{Err: "no such host", IsNotFound: true}, downloader.FailDomainNotFound},
		{&net.DNSError{Err: "server misbehaving", IsTemporary: true}, downloader.FailResolverUnavailable},
		{&net.DNSError{Err: "i/o timeout", IsTimeout: true}, downloader.FailResolverUnavailable},
		{fmt.Errorf("x: %w", context.Canceled), downloader.FailShuttingDown},
		{opErr("dial", os.NewSyscallError("syscall", syscall.ECONNREFUSED)), downloader.FailConnectRefused},
		{opErr("dial", timeoutErr{}), downloader.FailConnectTimeout},
		{opErr("read", timeoutErr{}), downloader.FailResponseTimeout},
		{opErr("read", os.NewSyscallError("syscall", syscall.ECONNRESET)), downloader.FailConnectionReset},
		{opErr("dial", os.NewSyscallError("syscall", syscall.EMFILE)), downloader.FailLocalQueueFull},
		{io.ErrUnexpectedEOF, downloader.FailConnectionReset},
		{fmt.Errorf("wrapped: %w", io.EOF), downloader.FailConnectionReset},
		{x509.UnknownAuthorityError{}, downloader.FailTLSFailed},
		{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, downloader.FailTLSFailed},
		{errors.New("net/http: TLS handshake timeout"), downloader.FailTLSFailed},
		{errors.New("net/http: HTTP/1.x transport connection broken: malformed HTTP response"), downloader.FailConnectionReset},
		{context.DeadlineExceeded, downloader.FailResponseTimeout},
	}
	for _, tt := range tests {
		if got := Classify(tt.err).FailReason(); got != tt.want {
			t.Errorf("Classify(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
	for _, r := range []downloader.FailReason{downloader.FailResolverUnavailable, downloader.FailShuttingDown, downloader.FailLocalQueueFull} {
		if r.HasReachedOrigin() {
			t.Errorf("%s must not count as reaching the origin", r)
		}
	}
}

func BenchmarkFetch(b *testing.B) {
	page := []byte("<html><body>" + strings.Repeat("<p>Some paragraph text, 中文内容.</p>\n", 500) + "</body></html>")
	o := newOrigin(b, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(page)))
		w.Write(page)
	})
	e := newEnv(b, o)
	b.Run("serial", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			if out := e.fetch(context.Background(), "http://bench.test/"); out.FailReason != "" {
				b.Fatal(out.FailReason)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pages/s")
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if out := e.fetch(context.Background(), "http://bench.test/"); out.FailReason != "" {
					b.Errorf("%s: %+v", out.FailReason, out.HealthSignal)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pages/s")
	})
}

package fetch

import (
	"bytes"
	"context"
	"crypto/tls"
	"strings"
	"testing"

	"downloader"
	"downloader/internal/nginxtest"
)

// nginxEnv is a fetcher whose *.example.com goes to a real nginx: https on its TLS port
// (HTTP/2 and HTTP/1.1 under the test CA), http on its plain one.
func nginxEnv(t testing.TB, s *nginxtest.Server, opts ...envOption) *env {
	t.Helper()
	opts = append(opts,
		withRule("*.example.com:443:"+s.HTTPSAddr), withRule("*.example.com:80:"+s.HTTPAddr),
		withConfig(func(c *Config) { c.TLSConfig = &tls.Config{RootCAs: s.CA.Pool()} }))
	return newEnv(t, nil, opts...)
}

// TestNginx: the fetcher against Debian's nginx, a real origin: HTTP/2 by ALPN (one
// connection for several requests, each a stream), gzip and brotli decoded to the bytes
// of the file, 429 with the origin's Retry-After, a 421 over HTTP/2 sent again once on
// HTTP/1.1, and HTTP/1.1 when HTTP/2 is off or the scheme is http.
func TestNginx(t *testing.T) {
	page := []byte("<!doctype html><html><head><title>nginx page</title></head><body>" +
		strings.Repeat("<p>Some text of the page, long enough to be worth compressing.</p>", 200) + "</body></html>")
	s := nginxtest.Start(t, map[string][]byte{
		"page.html": page, "gzip/page.html": page, "limited/page.html": page,
	})
	e := nginxEnv(t, s)
	before := len(s.Requests())

	check := func(t *testing.T, out *downloader.Outcome, version string) {
		t.Helper()
		if out.FailReason != "" || out.HTTPStatus != 200 {
			t.Fatalf("fail_reason %q http_status %d", out.FailReason, out.HTTPStatus)
		}
		if versionOf(out) != version {
			t.Errorf("http_version %s, want %s", versionOf(out), version)
		}
		if !bytes.Equal(out.Body, page) {
			t.Errorf("body: %d bytes, not the file's %d", len(out.Body), len(page))
		}
	}
	t.Run("h2, br", func(t *testing.T) {
		for range 3 {
			check(t, e.fetch(context.Background(), "https://www.example.com/page.html"), "2")
		}
	})
	t.Run("h2, gzip", func(t *testing.T) {
		check(t, e.fetch(context.Background(), "https://www.example.com/gzip/page.html"), "2")
	})
	t.Run("plain http", func(t *testing.T) {
		check(t, e.fetch(context.Background(), "http://www.example.com/page.html"), "1.1")
	})
	t.Run("HTTP/2 off", func(t *testing.T) {
		off := nginxEnv(t, s, withConfig(func(c *Config) { c.DisableHTTP2 = true }))
		check(t, off.fetch(context.Background(), "https://www.example.com/page.html"), "1.1")
	})
	t.Run("429", func(t *testing.T) {
		check(t, e.fetch(context.Background(), "https://www.example.com/limited/page.html"), "2")
		out := e.fetch(context.Background(), "https://www.example.com/limited/page.html")
		if out.HTTPStatus != 429 || out.FailReason != downloader.FailHTTPStatusError {
			t.Fatalf("second request in the minute: http_status %d fail_reason %q, want 429", out.HTTPStatus, out.FailReason)
		}
		if ra := out.HealthSignal.RetryAfterSeconds; ra == nil || *ra != 30 {
			t.Errorf("retry_after_seconds %v, want nginx's 30", ra)
		}
	})
	t.Run("421", func(t *testing.T) {
		admitted := len(e.hops.admitted())
		out := e.fetch(context.Background(), "https://www.example.com/misdirected")
		if out.HTTPStatus != 421 || versionOf(out) != "1.1" {
			t.Errorf("http_status %d http_version %s, want nginx's 421 again over HTTP/1.1", out.HTTPStatus, versionOf(out))
		}
		if n := len(e.hops.admitted()) - admitted; n != 1 {
			t.Errorf("%d hop admissions for the 421's second send, want 1", n)
		}
	})

	// What nginx saw: the compression each answer used is in its headers (checked by
	// the bodies above); the protocol of each request is in its log.
	var h2, h1 int
	for _, r := range s.Requests()[before:] {
		switch r.Protocol {
		case "HTTP/2.0":
			h2++
		case "HTTP/1.1":
			h1++
		}
	}
	// (The 421's second send is the last request: its line may not be written yet.)
	if h2 < 6 || h1 < 2 {
		t.Errorf("nginx logged %d HTTP/2 and %d HTTP/1.1 requests, want at least 6 and 2", h2, h1)
	}
}

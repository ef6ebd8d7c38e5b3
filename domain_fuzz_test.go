package downloader_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"downloader"
)

// FuzzParseTargetURL: any URL a caller, a task file or a lease message gives is either
// refused with an error naming the field, or accepted as an http(s) URL with a host, no
// credentials, a valid port, and a domain that is the normalised host (a fixed point, the
// limiter's key) which the engine would accept again as the request's own domain field.
// The URL decoder of every entry (server.FuzzEntries reaches it only through JSON).
func FuzzParseTargetURL(f *testing.F) {
	for _, s := range []string{
		"http://example.com/", "HTTPS://Example.COM.:443/a?b#c", "http://例子.测试/", "http://[::1]:8080/",
		"http://user:pw@example.com/", "ftp://example.com/", "http://:80/", "http://example.com:0/",
		"http://example.com:65536/", "http://example.com:+80/", "http://a..b/", "http://%zz/", "//example.com/",
		"http://0xa9.0xfe.0xa9.0xfe/", "http://[::ffff:10.0.0.5]/", "http://xn--/", "http:example.com", "\x00",
		"http://" + strings.Repeat("a", 8190), "http://example.com/" + strings.Repeat("p", 8200),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, domain, err := downloader.ParseTargetURL("url", raw)
		if err != nil {
			var e *downloader.Error
			if !errors.As(err, &e) || downloader.ErrorField(err) != "url" {
				t.Fatalf("ParseTargetURL(%q): error %v does not name the field", raw, err)
			}
			return
		}
		if u == nil {
			t.Fatalf("ParseTargetURL(%q): no URL and no error", raw)
		}
		if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
			t.Fatalf("ParseTargetURL(%q): scheme %q accepted", raw, u.Scheme)
		}
		if u.User != nil {
			t.Fatalf("ParseTargetURL(%q): credentials accepted", raw)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				t.Fatalf("ParseTargetURL(%q): port %q accepted", raw, p)
			}
		}
		again, err := downloader.CanonicalHost(u.Hostname())
		if err != nil || again != domain {
			t.Fatalf("ParseTargetURL(%q): domain %q, but the host %q normalises to %q (%v)", raw, domain, u.Hostname(), again, err)
		}
		if d2, err := downloader.CanonicalHost(domain); err != nil || d2 != domain {
			t.Fatalf("ParseTargetURL(%q): domain %q is not a fixed point: %q %v", raw, domain, d2, err)
		}
		// The URL as the engine passes it on parses to the same domain.
		_, d3, err := downloader.ParseTargetURL("url", u.String())
		if err != nil || d3 != domain {
			t.Fatalf("ParseTargetURL(%q) → %q → domain %q, %v; want %q", raw, u.String(), d3, err, domain)
		}
	})
}

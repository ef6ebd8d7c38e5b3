package downloader

import (
	"strings"
	"testing"
)

func TestCanonicalHost(t *testing.T) {
	tests := []struct {
		in, want string
		isErr    bool
	}{
		{"Example.COM", "example.com", false},
		{"example.com.", "example.com", false},
		{"example.com:8080", "example.com", false},
		{"example.com:", "example.com", false},
		{"例子.测试", "xn--fsqu00a.xn--0zwm56d", false},
		{"BÜCHER.test", "xn--bcher-kva.test", false},
		{"ｓｉｔｅ.test", "site.test", false},
		{"ＥＸＡＭＰＬＥ．ｃｏｍ", "example.com", false},
		{"a。b", "a.b", false},              // U+3002 ideographic full stop
		{"a．b", "a.b", false},              // U+FF0E full-width full stop
		{"a｡b", "a.b", false},              // U+FF61 half-width ideographic full stop
		{"faß.de", "xn--fa-hia.de", false}, // nontransitional, as browsers
		{"r3---sn-abc.example", "r3---sn-abc.example", false},
		{"_dmarc.example", "_dmarc.example", false},
		{"%41.test", "a.test", false},
		{"%65xample%2ecom", "example.com", false},
		{"%E4%BE%8B%E5%AD%90.test", "xn--fsqu00a.test", false},
		{"xn--bcher-kva.test", "xn--bcher-kva.test", false},
		// The seven spellings of 11.22.33.44 (WHATWG IPv4 parser), and more.
		{"11.22.33.44", "11.22.33.44", false},
		{"0x0b16212c", "11.22.33.44", false},
		{"185999660", "11.22.33.44", false},
		{"013.026.041.054", "11.22.33.44", false},
		{"11.22.8492", "11.22.33.44", false},
		{"11.1450284", "11.22.33.44", false},
		{"0xb.0x16.0x21.0x2c", "11.22.33.44", false},
		{"0XB.026.8492", "11.22.33.44", false},
		{"11.22.33.44.", "11.22.33.44", false},
		{"１１．２２．３３．４４", "11.22.33.44", false},
		{"11%2e22%2e33%2e44", "11.22.33.44", false},
		{"11.22.33.44:80", "11.22.33.44", false},
		{"11.22.33.0x1g", "11.22.33.0x1g", false}, // the last label is no number: a name
		{"0x", "0.0.0.0", false},
		{"127.1", "127.0.0.1", false},
		// IPv6: compressed, lower case, embedded IPv4 as hex, brackets dropped.
		{"[::1]:80", "::1", false},
		{"[2001:DB8::1]", "2001:db8::1", false},
		{"2001:db8::1", "2001:db8::1", false},
		{"[2001:db8:0:0:0:0:0:1]", "2001:db8::1", false},
		{"[0:0:0:0:0:0:0:0]", "::", false},
		{"[1:0:0:2:0:0:0:3]", "1:0:0:2::3", false},
		{"[1:0:0:2:0:0:3:4]", "1::2:0:0:3:4", false},
		{"[::ffff:1.2.3.4]", "", true}, // IPv4-mapped: the IPv4 address is the key
		{"[::FFFF:7f00:1]", "", true},
		{"[::1.2.3.4]", "::102:304", false},
		{"[64:ff9b::1.2.3.4]", "64:ff9b::102:304", false},
		{"[1:2:3:4:5:6:7::]", "1:2:3:4:5:6:7:0", false},
		{"127.0.0.1:80", "127.0.0.1", false},
		// Refused, as a browser refuses them.
		{"", "", true},
		{".", "", true},
		{"[::1", "", true},
		{"a:b:c", "", true},
		{"[::1%25eth0]", "", true},
		{"[1:2:3:4:5:6:7:8:9]", "", true},
		{"[::01.2.3.4]", "", true},
		{"[1::2::3]", "", true},
		{"256.256.256.256", "", true},
		{"1.2.3.4.5", "", true},
		{"0x100000000", "", true},
		{"1.2.3.09", "", true},
		{"a.b.0x", "", true},
		{"example.com:http", "", true},
		{"exa mple.com", "", true},
		{"exa%20mple.com", "", true},
		{"a%25b.test", "", true},
		{"a%zzb", "", true},
		{"a..", "", true},
		{"xn--.test", "", true},
		{"a!b.test", "", true},
		{"a<b", "", true},
		{"a^b", "", true},
		{"a|b", "", true},
		{"xn--zz.test", "", true},
		{"\xff.test", "", true},
		{strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60) + "." + strings.Repeat("e", 60) + ".com", "", true},
		{"exa mple.com", "", true},
	}
	for _, tt := range tests {
		got, err := CanonicalHost(tt.in)
		if (err != nil) != tt.isErr || got != tt.want {
			t.Errorf("CanonicalHost(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.isErr)
		}
		if err != nil && ErrorField(err) != "domain" {
			t.Errorf("CanonicalHost(%q): error field %q", tt.in, ErrorField(err))
		}
		if err == nil {
			if again, err := CanonicalHost(got); err != nil || again != got {
				t.Errorf("CanonicalHost(%q) = %q is not a fixed point: %q, %v", tt.in, got, again, err)
			}
		}
	}
}

func TestParseTargetURL(t *testing.T) {
	tests := []struct {
		in, domain string
		isErr      bool
	}{
		{"http://News.Example.TW:80/a?b", "news.example.tw", false},
		{"https://例子.测试/", "xn--fsqu00a.xn--0zwm56d", false},
		{"ftp://a.test/", "", true},
		{"http://u:p@a.test/", "", true},
		{"http:///path", "", true},
		{"http://a.test:0/", "", true},
		{"http://a.test:65536/", "", true},
		{"", "", true},
		{"http://" + strings.Repeat("a", 9000) + ".test/", "", true},
	}
	for _, tt := range tests {
		_, d, err := ParseTargetURL("url", tt.in)
		if (err != nil) != tt.isErr || d != tt.domain {
			t.Errorf("ParseTargetURL(%q) = %q, %v", tt.in, d, err)
		}
		if err != nil && ErrorField(err) != "url" {
			t.Errorf("ParseTargetURL(%q): field %q", tt.in, ErrorField(err))
		}
	}
}

func TestFailReasonsAreClosedAndLabelled(t *testing.T) {
	reached := map[FailReason]bool{}
	for _, r := range FailReasons() {
		if !r.IsValid() || r.Label() == string(r) || r.Label() == "" {
			t.Errorf("%s: not valid or no label", r)
		}
		reached[r] = r.HasReachedOrigin()
	}
	if len(reached) != len(failReasonInfo) {
		t.Errorf("FailReasons lists %d, table has %d", len(reached), len(failReasonInfo))
	}
	for _, r := range []FailReason{FailSelfRateLimited, FailLocalQueueFull, FailRendererUnavailable, FailRendererCrashed,
		FailRenderTimeout, FailResolverUnavailable, FailShuttingDown, FailInvalidTask} {
		if reached[r] {
			t.Errorf("%s must have has_reached_origin=false", r)
		}
	}
	if !FailReason("").HasReachedOrigin() || FailReason("bogus").IsValid() {
		t.Error("success must have reached the origin; unknown reasons are invalid")
	}
}

// FuzzCanonicalHostFixedPoint: never panics; a result is lower case, has no port or trailing dot,
// and is a fixed point.
func FuzzCanonicalHostFixedPoint(f *testing.F) {
	for _, s := range []string{"Example.COM.", "例子.测试:80", "[::1]:8080", "a..b", "xn--", "1.2.3.4", "-a-.b", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		d, err := CanonicalHost(host)
		if err != nil {
			if ErrorField(err) != "domain" {
				t.Fatalf("error without field: %v", err)
			}
			return
		}
		if d == "" || strings.HasSuffix(d, ".") || d != strings.ToLower(d) {
			t.Fatalf("CanonicalHost(%q) = %q", host, d)
		}
		again, err := CanonicalHost(d)
		if err != nil || again != d {
			t.Fatalf("not a fixed point: %q → %q → %q, %v", host, d, again, err)
		}
	})
}

// TestParseTargetURLRewritesHost: the URL handed downstream carries the canonical host,
// so the Host header, the dial and the TLS server name read the same host as the key.
func TestParseTargetURLRewritesHost(t *testing.T) {
	tests := []struct{ in, url, domain string }{
		{"http://ｓｉｔｅ.test/a?b#c", "http://site.test/a?b#c", "site.test"},
		{"HTTP://BÜCHER.test:80/", "http://xn--bcher-kva.test/", "xn--bcher-kva.test"},
		{"https://Example.COM.:443/x", "https://example.com/x", "example.com"},
		{"https://example.com:0443/", "https://example.com/", "example.com"},
		{"http://example.com:08080", "http://example.com:8080", "example.com"},
		{"http://example.com:/", "http://example.com/", "example.com"},
		{"http://0x0b16212c/", "http://11.22.33.44/", "11.22.33.44"},
		{"http://185999660/", "http://11.22.33.44/", "11.22.33.44"},
		{"http://013.026.041.054/", "http://11.22.33.44/", "11.22.33.44"},
		{"http://11.22.8492:8080/", "http://11.22.33.44:8080/", "11.22.33.44"},
		{"http://%41.test/", "http://a.test/", "a.test"},
		{"http://a。b．c｡test/", "http://a.b.c.test/", "a.b.c.test"},
		{"http://[2001:DB8:0::1]:8080/p", "http://[2001:db8::1]:8080/p", "2001:db8::1"},
		{"http://例子.测试?q", "http://xn--fsqu00a.xn--0zwm56d?q", "xn--fsqu00a.xn--0zwm56d"},
	}
	for _, tt := range tests {
		u, d, err := ParseTargetURL("url", tt.in)
		if err != nil || u.String() != tt.url || d != tt.domain || u.Hostname() != tt.domain {
			t.Errorf("ParseTargetURL(%q) = %v, %q, %v; want %q, %q", tt.in, u, d, err, tt.url, tt.domain)
		}
	}
	for _, in := range []string{"http://u@a.test/", "http://a.test:99999/", "http://1.2.3.256/", "http://[::1/", "http://a%25b/", "http://:80/"} {
		if _, _, err := ParseTargetURL("url", in); err == nil || ErrorField(err) != "url" {
			t.Errorf("ParseTargetURL(%q): error %v, want one naming url", in, err)
		}
	}
}

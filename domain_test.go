package downloader

import (
	"strings"
	"testing"
)

func TestNormalizeDomain(t *testing.T) {
	tests := []struct {
		in, want string
		isErr    bool
	}{
		{"Example.COM", "example.com", false},
		{"example.com.", "example.com", false},
		{"example.com:8080", "example.com", false},
		{"例子.测试", "xn--fsqu00a.xn--0zwm56d", false},
		{"BÜCHER.example", "xn--bcher-kva.example", false},
		{"[::1]:80", "::1", false},
		{"[2001:DB8::1]", "2001:db8::1", false},
		{"2001:db8::1", "2001:db8::1", false},
		{"127.0.0.1:80", "127.0.0.1", false},
		{"", "", true},
		{".", "", true},
		{"[::1", "", true},
		{"a:b:c", "", true},
		{strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60) + "." + strings.Repeat("e", 60) + ".com", "", true},
		{"exa mple.com", "", true},
	}
	for _, tt := range tests {
		got, err := NormalizeDomain(tt.in)
		if (err != nil) != tt.isErr || got != tt.want {
			t.Errorf("NormalizeDomain(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.isErr)
		}
		if err != nil && ErrorField(err) != "domain" {
			t.Errorf("NormalizeDomain(%q): error field %q", tt.in, ErrorField(err))
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

// FuzzNormalizeDomain: never panics; a result is lower case, has no port or trailing dot,
// and is a fixed point.
func FuzzNormalizeDomain(f *testing.F) {
	for _, s := range []string{"Example.COM.", "例子.测试:80", "[::1]:8080", "a..b", "xn--", "1.2.3.4", "-a-.b", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		d, err := NormalizeDomain(host)
		if err != nil {
			if ErrorField(err) != "domain" {
				t.Fatalf("error without field: %v", err)
			}
			return
		}
		if d == "" || strings.HasSuffix(d, ".") || d != strings.ToLower(d) {
			t.Fatalf("NormalizeDomain(%q) = %q", host, d)
		}
		again, err := NormalizeDomain(d)
		if err != nil || again != d {
			t.Fatalf("not a fixed point: %q → %q → %q, %v", host, d, again, err)
		}
	})
}

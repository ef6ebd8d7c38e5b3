package discover

import (
	"testing"
)

func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		in, want, domain string
	}{
		{"http://a.test", "http://a.test/", "a.test"},
		{"HTTP://A.Test/X", "http://a.test/X", "a.test"},
		{"http://a.test:80/", "http://a.test/", "a.test"},
		{"https://a.test:443/p", "https://a.test/p", "a.test"},
		{"http://a.test:443/p", "http://a.test:443/p", "a.test"},
		{"https://a.test:80/p", "https://a.test:80/p", "a.test"},
		{"http://a.test:0080/p", "http://a.test/p", "a.test"},
		{"http://a.test/a/./b/../c", "http://a.test/a/c", "a.test"},
		{"http://a.test/a/b/..", "http://a.test/a/", "a.test"},
		{"http://a.test/../../x", "http://a.test/x", "a.test"},
		{"http://a.test/a/.", "http://a.test/a/", "a.test"},
		{"http://a.test/p#frag", "http://a.test/p", "a.test"},
		{"http://a.test/p?", "http://a.test/p", "a.test"},
		{"http://a.test/p?b=2&a=1", "http://a.test/p?b=2&a=1", "a.test"}, // order kept
		{"http://a.test/a%2Fb", "http://a.test/a%2Fb", "a.test"},         // escapes kept
		{"http://a.test/a%2fb", "http://a.test/a%2fb", "a.test"},
		{"http://a.test/%7Euser", "http://a.test/%7Euser", "a.test"},
		{"http://a.test./p", "http://a.test/p", "a.test"},
		{"http://bücher.test/", "http://xn--bcher-kva.test/", "xn--bcher-kva.test"},
		{"http://[::1]:8080/x", "http://[::1]:8080/x", "::1"},
		{"http://[::1]:80/x", "http://[::1]/x", "::1"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080/", "127.0.0.1"},
		{"http://a.test/a b", "http://a.test/a%20b", "a.test"},
	} {
		got, domain, err := CanonicalString(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got != tc.want || domain != tc.domain {
			t.Errorf("%q: got %q %q, want %q %q", tc.in, got, domain, tc.want, tc.domain)
		}
		// Canonical of a canonical URL is itself.
		if again, _, err := CanonicalString(got); err != nil || again != got {
			t.Errorf("%q: not stable: %q → %q (%v)", tc.in, got, again, err)
		}
	}
	for _, bad := range []string{"", "ftp://a.test/", "mailto:x@a.test", "http://", "http://user:pw@a.test/", "http://a.test:99999/", "/relative"} {
		if got, _, err := CanonicalString(bad); err == nil {
			t.Errorf("%q: got %q, want an error", bad, got)
		}
	}
}

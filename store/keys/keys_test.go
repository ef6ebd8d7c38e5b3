package keys

import (
	"strings"
	"testing"
	"time"
)

func TestEscapeDomain(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a.example", "a.example"},
		{"xn--fiqs8s.example", "xn--fiqs8s.example"},
		{"::1", "%3A%3A1"},
		{"2001:db8::1", "2001%3Adb8%3A%3A1"},
		{"100%", "100%25"},
		{"%3A", "%253A"},
		{"", ""},
	} {
		if got := EscapeDomain(tc.in); got != tc.want {
			t.Errorf("EscapeDomain(%q) = %q; want %q", tc.in, got, tc.want)
		}
		if got := UnescapeDomain(tc.want); got != tc.in {
			t.Errorf("UnescapeDomain(%q) = %q; want %q", tc.want, got, tc.in)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"downloader:fetch_result:", "downloader:fetch_result;"},
		{"a\xff", "b"},
		{"\xff\xff", ""},
	} {
		if got := string(PrefixEnd(tc.in)); got != tc.want {
			t.Errorf("PrefixEnd(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{strings.Repeat("0", 32), true},
		{"0123456789abcdef0123456789abcdef", true},
		{"0123456789ABCDEF0123456789abcdef", false},
		{strings.Repeat("0", 31), false},
		{strings.Repeat("0", 33), false},
		{strings.Repeat("g", 32), false},
		{"", false},
	} {
		if got := ValidID(tc.in); got != tc.want {
			t.Errorf("ValidID(%q) = %v; want %v", tc.in, got, tc.want)
		}
	}
}

// TestResultIDOrder: ids sort newest first by fetched_at, then latest insertion first.
func TestResultIDOrder(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ids := []string{ // in the order a listing shows them
		ResultID(at.Add(time.Hour), 4),
		ResultID(at.Add(time.Nanosecond), 3),
		ResultID(at.Add(time.Nanosecond), 2),
		ResultID(at, 1),
	}
	for i, id := range ids {
		if !ValidID(id) {
			t.Fatalf("ResultID gave %q, not a valid id", id)
		}
		if i > 0 && ids[i-1] >= id {
			t.Errorf("id %d %s does not sort after %s", i, id, ids[i-1])
		}
	}
	if got := string(ByDomainKey("::1", ids[0])); got != "downloader:fetch_result:domain:%3A%3A1:"+ids[0] {
		t.Errorf("ByDomainKey = %q", got)
	}
}

// TestNamespace checks SPEC §5: the downloader: namespace holds exactly two tables, and the
// two key forms of fetch_result never share a prefix (a scan of one must not meet the other).
func TestNamespace(t *testing.T) {
	tables := []string{"downloader:fetch_result:", "downloader:domain_runtime:"}
	for _, k := range []string{Settings, FetchResult, FetchResultByDomain, PageContent} {
		inTable := false
		for _, table := range tables {
			inTable = inTable || strings.HasPrefix(k, table)
		}
		if strings.HasPrefix(k, "downloader:") && !inTable {
			t.Errorf("key %q is in the downloader: namespace but not in one of its two tables", k)
		}
		if strings.Count(k, ":") < 2 { // a prefix ends in the colon before its {key}
			t.Errorf("key %q is not {service}:{table}:{key}", k)
		}
	}
	if strings.HasPrefix(FetchResult, FetchResultByDomain) || strings.HasPrefix(FetchResultByDomain, FetchResult) {
		t.Errorf("fetch_result key forms overlap: %q and %q", FetchResult, FetchResultByDomain)
	}
}

package htmltext

import (
	"mime"
	"strings"
	"testing"
)

// TestMediaTypeIsParseMediaTypes: MediaType gives mime.ParseMediaType's media type when the
// header parses, and the lower-cased, trimmed part before ';' when it does not, as it did
// when it called the parser.
func TestMediaTypeIsParseMediaTypes(t *testing.T) {
	for _, ct := range []string{
		"", "text/html", "text/html; charset=utf-8", "Text/HTML; charset=GBK", "  text/html  ;charset=x",
		"TEXT/PLAIN", "text/html; ; =", "text/html; charset=a; charset=b", "application/xhtml+xml",
		"text/html\t;q=1", "text/ĥtml", "TEXT/ĤTML; x=y", "text/html;", ";charset=utf-8", "bogus",
		"text/html \u00a0", "\xff/\xfe", "a/b; c=\"d;e\"",
	} {
		want, _, err := mime.ParseMediaType(ct)
		if err != nil {
			want, _, _ = strings.Cut(strings.ToLower(ct), ";")
			want = strings.TrimSpace(want)
		}
		if got := MediaType(ct); got != want {
			t.Errorf("MediaType(%q) = %q, want %q", ct, got, want)
		}
	}
}

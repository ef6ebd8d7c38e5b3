package htmltext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTextUpTo: TextUpTo is Text while it fits, and a prefix of it, at a character
// boundary, within maxBytes when it does not (a NUL is a three-byte U+FFFD).
func TestTextUpTo(t *testing.T) {
	for _, tt := range []struct {
		name, body, ct string
		maxBytes       int
	}{
		{"fits", "<p>one two</p><p>three</p>", "text/html", 100},
		{"cut in words", "<p>" + strings.Repeat("word ", 100) + "</p>", "text/html", 64},
		{"NULs", strings.Repeat("\x00", 1000), "text/html", 100},
		{"multibyte", strings.Repeat("中文", 100), "text/plain; charset=utf-8", 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			full := Text([]byte(tt.body), tt.ct)
			got, cut := TextUpTo([]byte(tt.body), tt.ct, tt.maxBytes)
			if len(got) > tt.maxBytes || !utf8.ValidString(got) || !strings.HasPrefix(full, got) {
				t.Errorf("%q (%d bytes) is not a prefix of Text within %d bytes", got, len(got), tt.maxBytes)
			}
			if cut != (got != full) || (len(full) <= tt.maxBytes && got != full) {
				t.Errorf("cut=%v with %d of %d bytes", cut, len(got), len(full))
			}
		})
	}
}

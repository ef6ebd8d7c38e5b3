package render

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"downloader/htmltext"
)

// TestRenderVisibleText: an empty shell whose only visible text is "Loading", with its
// content in display:none, hidden, visibility:hidden, <template> and <noscript> blocks,
// renders to the text a reader sees ("Loading"), while raw_text_length keeps the served
// document's rule (htmltext: hidden CSS is not known before rendering).
func TestRenderVisibleText(t *testing.T) {
	t.Parallel() // owns its fixture and pool (parallelTests)
	ownFixture(t)
	o := newSiteOrigin(t, map[string]http.HandlerFunc{"/": serveFile("shell.html", "text/html; charset=utf-8")})
	p := o.pool(t, Config{})
	out := p.Render(context.Background(), getFixture(t).url(siteName(1)+"/"), nil, 20*time.Second)
	checkCause(t, out)
	if out.FailReason != "" || out.HTTPStatus != 200 {
		t.Fatalf("fail_reason=%s http_status=%d, want null and 200", failReason(out), out.HTTPStatus)
	}
	if out.Text != "Loading" || deref(out.TextLength) != len("Loading") {
		t.Errorf("text %q text_length %d, want %q and %d", out.Text, deref(out.TextLength), "Loading", len("Loading"))
	}
	wantRaw, _ := htmltext.VisibleTextLength(strings.NewReader(string(testdata("shell.html"))))
	if deref(out.RawTextLength) != wantRaw || wantRaw <= len("Loading") {
		t.Errorf("raw_text_length %d, want htmltext's %d (> %d)", deref(out.RawTextLength), wantRaw, len("Loading"))
	}
}

// TestCollapseSpace: the rendered text follows raw_text_length's white-space rule, so the
// two lengths stay comparable.
func TestCollapseSpace(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"Loading", "Loading"},
		{"  a\n\nb \t c  ", "a b c"},
		{"\u00a0x\u3000y\u2028", "x y"},
		{"日本語\n\nテキスト", "日本語 テキスト"},
		{"\n\n\n", ""},
	} {
		got := collapseSpace(tt.in)
		if got != tt.want {
			t.Errorf("collapseSpace(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if n := utf8.RuneCountInString(got); n != htmltext.PlainTextLength([]byte(tt.in)) {
			t.Errorf("collapseSpace(%q): %d runes, htmltext.PlainTextLength says %d", tt.in, n, htmltext.PlainTextLength([]byte(tt.in)))
		}
	}
}

package htmltext

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestVisibleText(t *testing.T) {
	tests := []struct {
		name, html, want string
	}{
		{"empty", "", ""},
		{"plain", "hello", "hello"},
		{"trim and collapse", "  \n hello \t\r\n  world \n", "hello world"},
		{"document", `<!DOCTYPE html><html><head><title>T</title><meta charset="utf-8">
			<style>p{color:red}</style><script>var x = "<p>no</p>";</script></head>
			<body><h1>Title</h1><p>Some <b>bold</b> text.</p></body></html>`, "Title Some bold text."},
		{"entities", "<p>a &amp; b &lt;c&gt; &copy;&#20013;&#x6587;</p>", "a & b <c> ©中文"},
		{"nbsp collapses", "a&nbsp;&nbsp; b", "a b"},
		{"ideographic space", "你好\u3000\u3000世界", "你好 世界"},
		{"inline joins", "foo<b>bar</b><i>baz</i>", "foobarbaz"},
		{"blocks separate", "<div>a</div><div>b</div><p>c</p>d<br>e<li>f", "a b c d e f"},
		{"hidden elements", `a<script>s</script><style>s</style><noscript>n</noscript>` +
			`<template>t<p>x</p></template><svg><text>v</text><title>x</title></svg>` +
			`<iframe>i</iframe><noembed>n</noembed><noframes>n</noframes>` +
			`<datalist><option>o</option></datalist>b`, "ab"},
		{"title in body", "<body><title>t</title>x</body>", "x"},
		{"nested svg", "<svg><svg></svg>hidden</svg>shown", "shown"},
		{"nested template", "<template><template>x</template>y</template>z", "z"},
		{"self-closing svg hides nothing", "<svg/>shown", "shown"},
		{"end tag closes inner hidden", "<template><svg>x</template>y", "y"},
		{"stray end tags", "</script></svg></template>a</head>b", "ab"},
		{"head without end", "<html><head><title>t</title><p>body text", "body text"},
		{"head text starts body", "<head><meta x=1> visible </head>", "visible"},
		{"head after body ignored", "<body>a<head>b</head></body>", "ab"},
		{"unclosed script", "a<script>never closed", "a"},
		{"comments", "a<!-- hidden -->b<!-- unclosed", "ab"},
		{"broken tags", "<p <div>>x</p>< p>y", ">x < p>y"},
		{"textarea and pre shown", "<textarea>t</textarea><pre> p  q </pre>", "t p q"},
		{"cdata outside foreign", "<![CDATA[x]]>y", "y"},
		{"upper-case tags", "<SCRIPT>x</SCRIPT><Svg\n>y</SVG >z<DIV>w", "z w"},
		{"long tag names", "<averyveryverylongtagname>a</averyveryverylongtagname>b", "ab"},
		{"chinese", "<p>中文内容</p><p>第二段</p>", "中文内容 第二段"},
		{"invalid utf8", "a\xffb", "a\ufffdb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := VisibleText(strings.NewReader(tt.html))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("VisibleText = %q, want %q", got, tt.want)
			}
			n, err := VisibleTextLength(strings.NewReader(tt.html))
			if err != nil {
				t.Fatal(err)
			}
			if want := utf8.RuneCountInString(tt.want); n != want {
				t.Errorf("VisibleTextLength = %d, want %d", n, want)
			}
		})
	}
}

func TestPlainTextLength(t *testing.T) {
	for in, want := range map[string]int{
		"":                0,
		"  a  b \n":       3,
		"中文 \t 内容":        5,
		"<p>not html</p>": 15,
	} {
		if got := PlainTextLength([]byte(in)); got != want {
			t.Errorf("PlainTextLength(%q) = %d, want %d", in, got, want)
		}
	}
}

type failingReader struct{ after string }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.after == "" {
		return 0, errors.New("boom")
	}
	n := copy(p, r.after)
	r.after = r.after[n:]
	return n, nil
}

func TestReadError(t *testing.T) {
	n, err := VisibleTextLength(&failingReader{after: "<p>abc</p><p>"})
	if err == nil || err.Error() != "boom" {
		t.Fatalf("err = %v, want boom", err)
	}
	if n != 3 {
		t.Errorf("count so far = %d, want 3", n)
	}
}

// TestPathological checks that hostile inputs stay linear.
func TestPathological(t *testing.T) {
	for name, s := range map[string]string{
		"open tags":   strings.Repeat("<a ", 200_000),
		"entities":    strings.Repeat("&amp;&#1;&bogus;", 50_000),
		"svg nesting": strings.Repeat("<svg><template>", 50_000),
		"end tags":    strings.Repeat("</svg></template></head>", 50_000),
		"comments":    strings.Repeat("<!--x-->", 100_000),
	} {
		if _, err := VisibleTextLength(strings.NewReader(s)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestDeepNesting(t *testing.T) {
	var b strings.Builder
	for range 1000 {
		b.WriteString("<svg>")
	}
	b.WriteString("hidden")
	for range 1000 {
		b.WriteString("</svg>")
	}
	b.WriteString("shown")
	got, err := VisibleText(strings.NewReader(b.String()))
	if err != nil || got != "shown" {
		t.Errorf("VisibleText = %q, %v; want shown", got, err)
	}
}

func FuzzVisibleTextLength(f *testing.F) {
	for _, s := range []string{
		"", "a", "<p>a b</p>", "<script>x</script>y", "<head><title>t</title></head>body",
		"<svg><svg>x</svg>y</svg>z", "&amp;&nbsp;&#0;&#xffffff;", "<!--", "<", "</", "<a b='",
		"a\xff\xfeb", "<template><template>", "中文\u3000内容", "<plaintext><p>x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := VisibleTextLength(strings.NewReader(s))
		if err != nil {
			t.Fatalf("VisibleTextLength: %v", err)
		}
		text, err := VisibleText(strings.NewReader(s))
		if err != nil {
			t.Fatalf("VisibleText: %v", err)
		}
		if c := utf8.RuneCountInString(text); c != n {
			t.Fatalf("length %d but the text %q has %d runes", n, text, c)
		}
		if strings.HasPrefix(text, " ") || strings.HasSuffix(text, " ") || strings.Contains(text, "  ") {
			t.Fatalf("white space not collapsed or trimmed: %q", text)
		}
		if n > utf8.RuneCountInString(s) {
			t.Fatalf("more visible characters (%d) than the input has (%q)", n, s)
		}
		// Reading in tiny pieces gives the same answer.
		m, err := VisibleTextLength(&oneByteReader{s: s})
		if err != nil || m != n {
			t.Fatalf("one byte at a time: %d, %v; want %d", m, err, n)
		}
	})
}

type oneByteReader struct{ s string }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = r.s[0]
	r.s = r.s[1:]
	return 1, nil
}

// benchPage is a ~100 KB article-like page.
func benchPage() string {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html><html><head><title>Bench</title><style>body{margin:0}</style>`)
	b.WriteString(`<script>window.x = {a: 1, b: "<div>"};</script></head><body><nav><ul>`)
	for i := range 50 {
		fmt.Fprintf(&b, `<li><a href="/p/%d">Link %d</a></li>`, i, i)
	}
	b.WriteString(`</ul></nav><main>`)
	for i := 0; b.Len() < 100_000; i++ {
		fmt.Fprintf(&b, `<p class="para">第 %d 段：The quick brown fox &amp; the lazy dog, `+
			`<b>jumps</b> over <a href="#x">things</a>.</p>`+"\n", i)
	}
	b.WriteString(`</main><script src="/app.js"></script></body></html>`)
	return b.String()
}

func BenchmarkVisibleTextLength(b *testing.B) {
	page := benchPage()
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := VisibleTextLength(strings.NewReader(page)); err != nil {
			b.Fatal(err)
		}
	}
}

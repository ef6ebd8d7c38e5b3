package htmltext

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"
	"golang.org/x/text/encoding/korean"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/traditionalchinese"
	"golang.org/x/text/encoding/unicode"
)

// encode makes the bytes a site in charset e serves for s.
func encode(t *testing.T, e encoding.Encoding, s string) []byte {
	t.Helper()
	b, err := e.NewEncoder().Bytes([]byte(s))
	if err != nil {
		t.Fatalf("encode %q: %v", s, err)
	}
	return b
}

// cjkPages are the seeds' charsets, each with a text only that charset (and UTF-8) can
// write, so that a wrong decoding cannot pass by chance.
var cjkPages = []struct {
	label string // as a site writes it
	name  string // the WHATWG name Charset gives
	enc   encoding.Encoding
	text  string
}{
	{"gbk", "gbk", simplifiedchinese.GBK, "简体中文网页，欢迎访问"},
	{"GB2312", "gbk", simplifiedchinese.GBK, "新闻中心"},
	{"big5", "big5", traditionalchinese.Big5, "繁體中文網頁，歡迎光臨"},
	{"Shift_JIS", "shift_jis", japanese.ShiftJIS, "日本語のページへようこそ"},
	{"euc-kr", "euc-kr", korean.EUCKR, "한국어 웹 페이지에 오신 것을 환영합니다"},
}

func TestCharsetOfCJKPages(t *testing.T) {
	for _, p := range cjkPages {
		doc := func(head string) string {
			return "<!doctype html><html><head>" + head + "<title>Title</title></head><body><p>" + p.text + "</p></body></html>"
		}
		cases := []struct {
			name, ct string
			body     []byte
		}{
			{"header", "text/html; charset=" + p.label, encode(t, p.enc, doc(""))},
			{"header quoted", `text/html; charset="` + p.label + `"`, encode(t, p.enc, doc(""))},
			{"meta charset only", "text/html", encode(t, p.enc, doc(`<meta charset="`+p.label+`">`))},
			{"meta http-equiv only", "text/html", encode(t, p.enc, doc(`<meta http-equiv="Content-Type" content="text/html; charset=`+p.label+`">`))},
			{"meta and no header", "", encode(t, p.enc, doc(`<meta charset=`+p.label+`>`))},
			{"header beats a wrong meta", "text/html; charset=" + p.label, encode(t, p.enc, doc(`<meta charset="utf-8">`))},
		}
		for _, c := range cases {
			t.Run(p.label+"/"+c.name, func(t *testing.T) {
				if _, name := Charset(c.body, c.ct); name != p.name {
					t.Errorf("Charset = %q, want %q", name, p.name)
				}
				ct := c.ct
				if ct == "" {
					ct = "text/html"
				}
				got := UTF8(c.body, ct)
				if !utf8.Valid(got) || !strings.Contains(string(got), p.text) || !strings.Contains(string(got), "<title>Title</title>") {
					t.Errorf("UTF8 = %q, want UTF-8 holding %q", got, p.text)
				}
				if text := Text(c.body, ct); text != p.text {
					t.Errorf("Text = %q, want %q", text, p.text)
				}
				if n := TextLength(c.body, ct); n != utf8.RuneCountInString(p.text) {
					t.Errorf("TextLength = %d, want %d", n, utf8.RuneCountInString(p.text))
				}
				body, outCT := AsUTF8(c.body, ct)
				if string(body) != string(got) || !strings.HasSuffix(outCT, "charset=utf-8") || MediaType(outCT) != "text/html" {
					t.Errorf("AsUTF8 = %q, %q", body, outCT)
				}
				// What AsUTF8 gives reads back the same: the label now says utf-8, and a
				// meta that still names the old charset is outranked by it.
				if again := UTF8(body, outCT); string(again) != string(body) {
					t.Errorf("decoding twice changed the document")
				}
			})
		}
	}
}

func TestCharsetRules(t *testing.T) {
	utf8Body := "<p>" + strings.Repeat("ascii head ", 200) + "中文在一千字节之后</p>" // the first 1024 bytes are ASCII
	latin := encode(t, charmap.Windows1252, "<p>café</p>")
	utf16 := append([]byte{0xff, 0xfe}, encode(t, unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM), "<p>中文</p>")...)
	tests := []struct {
		name, ct string
		body     []byte
		charset  string
		text     string
	}{
		{"no declaration, UTF-8 past the first KiB", "text/html", []byte(utf8Body), "utf-8", strings.TrimSuffix(strings.TrimPrefix(utf8Body, "<p>"), "</p>")},
		{"no declaration, not UTF-8: windows-1252", "text/html", latin, "windows-1252", "café"},
		{"meta windows-1252 is obeyed over valid UTF-8", "text/html", []byte(`<meta charset="iso-8859-1"><p>é</p>`), "windows-1252", "Ã©"},
		{"UTF-8 BOM beats the header", "text/html; charset=gbk", append([]byte{0xef, 0xbb, 0xbf}, "<p>中文</p>"...), "utf-8", "中文"},
		{"UTF-16 BOM", "text/html", utf16, "utf-16le", "中文"},
		{"meta utf-16 means utf-8", "text/html", []byte(`<meta charset="utf-16"><p>中文</p>`), "utf-8", "中文"},
		{"unknown label: meta, then fallback", "text/html; charset=klingon", []byte(`<meta charset="big5"><p>` + string(encode(t, traditionalchinese.Big5, "繁體")) + `</p>`), "big5", "繁體"},
		{"UTF-8 cut mid-character at the cap", "text/html", []byte("<p>中文")[:len("<p>中文")-1], "utf-8", "中\ufffd\ufffd"},
		{"invalid byte in UTF-8 is one U+FFFD", "text/html; charset=utf-8", []byte("<p>a\xffb</p>"), "utf-8", "a\ufffdb"},
		{"plain text in GBK", "text/plain; charset=gbk", encode(t, simplifiedchinese.GBK, "  纯文本\n\n内容 "), "gbk", "纯文本 内容"},
		{"not text: no text", "image/png", []byte("\x89PNG\r\n\x1a\n"), "windows-1252", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, name := Charset(tt.body, tt.ct); name != tt.charset {
				t.Errorf("Charset = %q, want %q", name, tt.charset)
			}
			if got := Text(tt.body, tt.ct); got != tt.text {
				t.Errorf("Text = %q, want %q", got, tt.text)
			}
			if n := TextLength(tt.body, tt.ct); n != utf8.RuneCountInString(tt.text) {
				t.Errorf("TextLength = %d, want %d", n, utf8.RuneCountInString(tt.text))
			}
			if tt.ct != "image/png" && !utf8.Valid(UTF8(tt.body, tt.ct)) {
				t.Errorf("UTF8 is not valid UTF-8: %q", UTF8(tt.body, tt.ct))
			}
		})
	}
}

func TestUTF8KeepsUTF8Bodies(t *testing.T) {
	b := []byte("<p>中文</p>")
	if got := UTF8(b, "text/html"); &got[0] != &b[0] {
		t.Error("a valid UTF-8 body was copied")
	}
}

func TestAsUTF8(t *testing.T) {
	gbk := encode(t, simplifiedchinese.GBK, "<p>中文</p>")
	png := []byte("\x89PNG\r\n\x1a\n\x00\xff")
	tests := []struct {
		name, ct string
		body     []byte
		wantBody string
		wantCT   string
	}{
		{"html in gbk", "text/html; charset=GBK", gbk, "<p>中文</p>", "text/html; charset=utf-8"},
		{"other parameters kept", "text/plain; format=flowed; charset=gbk", gbk, "<p>中文</p>", "text/plain; charset=utf-8; format=flowed"},
		{"unparsable parameters", "text/html; charset=gbk; =", gbk, "<p>中文</p>", "text/html; charset=utf-8"},
		{"xhtml", "application/xhtml+xml", []byte("<p>x</p>"), "<p>x</p>", "application/xhtml+xml; charset=utf-8"},
		{"image as it is", "image/png", png, string(png), "image/png"},
		{"pdf as it is", "application/pdf", png, string(png), "application/pdf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ct := AsUTF8(tt.body, tt.ct)
			if string(body) != tt.wantBody || ct != tt.wantCT {
				t.Errorf("AsUTF8 = %q, %q; want %q, %q", body, ct, tt.wantBody, tt.wantCT)
			}
		})
	}
}

func TestIsTextual(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/html; charset=gbk": true, "TEXT/PLAIN": true, "text/css": true, "application/xhtml+xml": true,
		"application/rss+xml": true, "application/json": true, "application/ld+json": true,
		"application/javascript": true, "image/png": false, "application/pdf": false,
		"application/octet-stream": false, "": false,
	} {
		if got := IsTextual(ct); got != want {
			t.Errorf("IsTextual(%q) = %v, want %v", ct, got, want)
		}
	}
}

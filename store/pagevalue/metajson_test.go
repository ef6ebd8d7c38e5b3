package pagevalue

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"downloader"
)

// tricky are strings whose JSON escaping differs between careless encoders and
// encoding/json: HTML characters, control characters, U+2028/U+2029, invalid UTF-8 (a
// lone continuation byte, a truncated sequence, an overlong form, a surrogate), DEL.
var tricky = []string{
	"", "plain", `quote " and \ backslash`, "<script>&amp;</script>", "tab\tnl\ncr\rbs\bff\f",
	"\x00\x01\x1f\x7f", "line\u2028para\u2029end", "\x80", "a\xe2\x80", "\xc0\xaf", "\xed\xa0\x80",
	"日本語 ✓ 🎉", "\ufffd", "mixed <\xff>\u2028\"",
}

func TestAppendMetaMatchesJSONMarshal(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 120_000_000, time.UTC)
	tests := []struct {
		name string
		m    Meta
	}{
		{"zero", Meta{}},
		{"no headers", Meta{URL: "http://a.test/", FinalURL: "http://a.test/x", ContentType: "text/html", FetchedAt: at, BodyBytes: 12}},
		{"chunked", Meta{URL: "u", FetchedAt: at, BodyBytes: 1 << 30, ChunkCount: 7}},
		{"negative numbers", Meta{BodyBytes: -1, ChunkCount: -3}},
		{"empty header map is omitted", Meta{ResponseHeaders: map[string][]string{}}},
		{"nil and empty values", Meta{ResponseHeaders: map[string][]string{"A": nil, "B": {}, "C": {""}}}},
		{"sorted keys", Meta{FetchedAt: at, ResponseHeaders: map[string][]string{
			"X-Z": {"1"}, "Content-Type": {"text/html; charset=utf-8"}, "Set-Cookie": {"a=1", "b=2"}, "a": {"lower"}, "B": {"upper"},
		}}},
		{"whole nanoseconds and year bounds", Meta{FetchedAt: time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC)}},
		{"year 0", Meta{FetchedAt: time.Date(0, 1, 1, 0, 0, 0, 1, time.UTC)}},
		{"year beyond 9999 keeps json.Marshal's result", Meta{URL: "x", FetchedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{"an offset zone", Meta{FetchedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", -(3*3600+30*60)))}},
	}
	for _, s := range tricky {
		tests = append(tests, struct {
			name string
			m    Meta
		}{"tricky " + strings.ToValidUTF8(s, "?"), Meta{URL: s, FinalURL: s + s, ContentType: s, FetchedAt: at,
			ResponseHeaders: map[string][]string{s: {s, "v"}, "k" + s: {s}}}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, _ := json.Marshal(&tt.m)
			if got := appendMeta(nil, &tt.m); !bytes.Equal(got, want) {
				t.Errorf("appendMeta = %s\njson.Marshal = %s", got, want)
			}
		})
	}
}

// TestEncodeMetaIsJSONMarshal: the metadata inside an encoded value is json.Marshal's,
// with its length prefix, whatever the length's uvarint width.
func TestEncodeMetaIsJSONMarshal(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, n := range []int{0, 100, 200, 20_000} { // uvarint widths 1, 1–2, 2, 3
		h := map[string][]string{"Big": {strings.Repeat("<&>", n)}}
		p := &downloader.Page{URL: "http://a.test/", FetchedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), ResponseHeaders: h, Body: []byte("b")}
		v, _ := c.Encode(p, 0)
		want, _ := json.Marshal(Meta{URL: p.URL, FetchedAt: p.FetchedAt, BodyBytes: 1, ResponseHeaders: h})
		l, w := binary.Uvarint(v[1:])
		if v[0] != Inline || w <= 0 || !bytes.Equal(v[1+w:1+w+int(l)], want) {
			t.Fatalf("n=%d: value head %q, want meta %q", n, v[:min(len(v), 64)], want[:min(len(want), 64)])
		}
		if _, m, _, err := DecodeHead(v); err != nil || m.ResponseHeaders["Big"][0] != h["Big"][0] {
			t.Fatalf("n=%d: DecodeHead: %v", n, err)
		}
	}
}

// FuzzAppendMeta holds the hand-written encoder byte-equal to json.Marshal on any strings,
// header keys and values, numbers and instants.
//
//	go test -run '^$' -fuzz FuzzAppendMeta ./store/pagevalue/
func FuzzAppendMeta(f *testing.F) {
	for i, s := range tricky {
		f.Add(s, s, "Content-Type", s, s+"x", int64(i)*1_000_000_007, i, i%3)
	}
	f.Add("http://a.test/", "http://a.test/", "", "", "", int64(-1<<63), 0, 0)
	f.Fuzz(func(t *testing.T, url, ctype, key, v1, v2 string, unixNano int64, bodyBytes, chunkCount int) {
		m := Meta{URL: url, FinalURL: v2, ContentType: ctype, FetchedAt: time.Unix(0, unixNano).UTC(),
			BodyBytes: bodyBytes, ChunkCount: chunkCount}
		switch chunkCount & 3 {
		case 1:
			m.ResponseHeaders = map[string][]string{key: {v1, v2}, v1: {key}, v2: nil}
		case 2:
			m.ResponseHeaders = map[string][]string{key: {}}
		}
		want, _ := json.Marshal(&m)
		if got := appendMeta(nil, &m); !bytes.Equal(got, want) {
			t.Fatalf("appendMeta = %s\njson.Marshal = %s", got, want)
		}
	})
}

// BenchmarkEncodeMeta compares the hand-written metadata encoder with json.Marshal on a
// typical page's metadata (12 response headers).
//
//	go test -run '^$' -bench BenchmarkEncodeMeta -benchmem ./store/pagevalue/
func BenchmarkEncodeMeta(b *testing.B) {
	m := Meta{
		URL: "http://host-17.test/articles/1/42", FinalURL: "http://host-17.test/articles/1/42",
		ContentType: "text/html; charset=utf-8", FetchedAt: time.Date(2026, 12, 2, 7, 30, 1, 123456789, time.UTC),
		BodyBytes: 61_234,
		ResponseHeaders: map[string][]string{
			"Content-Type": {"text/html; charset=utf-8"}, "Date": {"Wed, 02 Dec 2026 07:30:01 GMT"},
			"Content-Length": {"61234"}, "Cache-Control": {"max-age=60"}, "Etag": {`"abc123"`},
			"Last-Modified": {"Tue, 01 Dec 2026 07:30:01 GMT"}, "Server": {"nginx"}, "Vary": {"Accept-Encoding"},
			"Set-Cookie": {"a=1; Path=/", "b=2; Path=/"}, "X-Frame-Options": {"DENY"},
			"Strict-Transport-Security": {"max-age=31536000"}, "Link": {`</style.css>; rel=preload`},
		},
	}
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(&m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendMeta", func(b *testing.B) {
		var dst []byte
		for b.Loop() {
			dst = appendMeta(dst[:0], &m)
		}
	})
	b.Run("Encode", func(b *testing.B) {
		c, err := NewCodec()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		p := &downloader.Page{URL: m.URL, FinalURL: m.FinalURL, ContentType: m.ContentType, FetchedAt: m.FetchedAt,
			ResponseHeaders: m.ResponseHeaders, Body: syntheticPage()}
		for b.Loop() {
			c.Encode(p, 0)
		}
	})
}

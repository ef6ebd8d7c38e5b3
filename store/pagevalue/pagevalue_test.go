package pagevalue

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"downloader"
)

func TestRoundTrip(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	small := []byte("<html>ok</html>")
	big := make([]byte, 64<<10) // incompressible enough to need chunks of 1 KiB
	for i := range big {
		big[i] = byte(i*7919 + i/13)
	}
	tests := []struct {
		name       string
		body       []byte
		chunkSize  int
		wantFormat byte
	}{
		{"inline", small, 0, Inline},
		{"inline under the chunk size", small, 1 << 10, Inline},
		{"chunked", big, 1 << 10, Chunked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &downloader.Page{URL: "http://a.test/", FinalURL: "http://a.test/x", ContentType: "text/html", FetchedAt: at, Body: tt.body}
			v, chunks := c.Encode(p, tt.chunkSize)
			format, m, compressed, err := DecodeHead(v)
			if err != nil || format != tt.wantFormat || m.ChunkCount != len(chunks) || m.BodyBytes != len(tt.body) {
				t.Fatalf("DecodeHead = %d %+v %v; want format %d, %d chunks", format, m, err, tt.wantFormat, len(chunks))
			}
			for _, ch := range chunks {
				if len(ch) > tt.chunkSize {
					t.Errorf("chunk of %d bytes, over %d", len(ch), tt.chunkSize)
				}
			}
			if format == Chunked {
				if len(compressed) != 0 {
					t.Errorf("chunked head carries %d body bytes", len(compressed))
				}
				compressed = bytes.Join(chunks, nil)
			}
			got, err := c.Page(Key(tt.body), m, compressed)
			if err != nil || !bytes.Equal(got.Body, tt.body) || got.URL != p.URL || got.FinalURL != p.FinalURL ||
				got.ContentType != p.ContentType || !got.FetchedAt.Equal(at) || got.PageKey != Key(tt.body) {
				t.Fatalf("Page = %+v, %v", got, err)
			}
			if _, err := c.Page(Key([]byte("other")), m, compressed); err == nil || !strings.Contains(err.Error(), "hash") {
				t.Errorf("Page under another key: %v; want a hash mismatch", err)
			}
		})
	}
}

func TestDecodeHeadRefusesCorruptValues(t *testing.T) {
	for name, v := range map[string][]byte{
		"empty":          {},
		"format":         {9, 0},
		"meta length":    {Inline, 200},
		"meta":           append([]byte{Inline, 2}, "{x"...),
		"negative body":  append([]byte{Inline, 17}, `{"body_bytes":-1}`...),
		"huge body":      append([]byte{Inline, 26}, `{"body_bytes":99999999999}`...),
		"negative count": append([]byte{Chunked, 18}, `{"chunk_count":-2}`...),
	} {
		if _, _, _, err := DecodeHead(v); err == nil {
			t.Errorf("%s: DecodeHead accepted %q", name, v)
		}
	}
}

// TestValueWithoutResponseHeaders: a value written before response headers were kept
// (its metadata has no response_headers) still reads, with nil headers.
func TestValueWithoutResponseHeaders(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := []byte("<html>old page</html>")
	meta := []byte(`{"url":"http://a.test/","final_url":"http://a.test/","content_type":"text/html","fetched_at":"2026-03-04T05:06:07Z","body_bytes":21}`)
	value := binary.AppendUvarint([]byte{Inline}, uint64(len(meta)))
	value = append(value, meta...)
	value = append(value, c.enc.EncodeAll(body, nil)...)
	format, m, compressed, err := DecodeHead(value)
	if err != nil || format != Inline {
		t.Fatalf("DecodeHead: %v %d", err, format)
	}
	p, err := c.Page(Key(body), m, compressed)
	if err != nil {
		t.Fatal(err)
	}
	if p.ResponseHeaders != nil || !bytes.Equal(p.Body, body) || p.URL != "http://a.test/" {
		t.Errorf("old value read as %+v", p)
	}
}

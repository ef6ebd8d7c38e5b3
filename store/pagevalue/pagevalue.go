// Package pagevalue is the value format of the page store (网页库, page:content:{sha256}),
// shared by the store backends (store/embedded, store/tikv) so that both write and check
// a page alike. A value is a format byte, the metadata as JSON (uvarint length-prefixed),
// then the zstd-compressed body (Inline) or nothing more (Chunked: the backend keeps the
// compressed body in ChunkCount values of its own).
package pagevalue

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"time"

	"github.com/klauspost/compress/zstd"

	"downloader"
)

// Value formats: the first byte of a page value.
const (
	Inline  byte = 1 // metadata, then the compressed body
	Chunked byte = 2 // metadata only; the compressed body is in ChunkCount chunks
)

// MaxBodyBytes bounds a page's body when it is read back: neither a corrupt length nor a
// decompression bomb in a corrupt value can make a read allocate more.
const MaxBodyBytes = 1 << 30

// Meta is the stored metadata of a page. BodyBytes is the uncompressed length, checked on
// read together with the hash.
type Meta struct {
	URL         string    `json:"url"`
	FinalURL    string    `json:"final_url"`
	ContentType string    `json:"content_type"`
	FetchedAt   time.Time `json:"fetched_at"`
	BodyBytes   int       `json:"body_bytes"`
	ChunkCount  int       `json:"chunk_count,omitempty"`
	// ResponseHeaders are the response's header fields as served; absent in the values
	// written before they were kept (read back as nil).
	ResponseHeaders map[string][]string `json:"response_headers,omitempty"`
}

// Key returns the page key of body: the lower-case hex SHA-256 of it.
func Key(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// Codec compresses and decompresses page bodies. Create it with NewCodec and release it
// with Close; its methods are safe for concurrent use.
type Codec struct {
	enc *zstd.Encoder // EncodeAll is safe for concurrent use
	dec *zstd.Decoder // DecodeAll is safe for concurrent use
}

// NewCodec returns a Codec using every core.
func NewCodec() (*Codec, error) {
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithDecoderMaxMemory(MaxBodyBytes))
	if err != nil {
		_ = enc.Close()
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return &Codec{enc: enc, dec: dec}, nil
}

// Close releases the codec's encoder and decoder.
func (c *Codec) Close() {
	_ = c.enc.Close()
	c.dec.Close()
}

// Encode returns p's value. With chunkSize > 0 a compressed body larger than chunkSize is
// not inlined: the value is Chunked and the body comes back cut into chunks of at most
// chunkSize bytes, for the caller to store beside it.
func (c *Codec) Encode(p *downloader.Page, chunkSize int) (value []byte, chunks [][]byte) {
	compressed := c.enc.EncodeAll(p.Body, nil)
	m := Meta{
		URL: p.URL, FinalURL: p.FinalURL, ContentType: p.ContentType,
		FetchedAt: p.FetchedAt.UTC(), BodyBytes: len(p.Body), ResponseHeaders: p.ResponseHeaders,
	}
	format := Inline
	if chunkSize > 0 && len(compressed) > chunkSize {
		format = Chunked
		m.ChunkCount = (len(compressed) + chunkSize - 1) / chunkSize
	}
	// The metadata is written after room for its length's uvarint and moved down once
	// its length is known: one allocation for the whole value when metaGuess holds.
	const head = 1 + binary.MaxVarintLen64
	value = make([]byte, head, head+metaGuess(&m)+len(compressed))
	value = appendMeta(value, &m)
	metaLen := len(value) - head
	value[0] = format
	w := binary.PutUvarint(value[1:head], uint64(metaLen))
	value = value[:1+w+copy(value[1+w:], value[head:])]
	if format == Inline {
		return append(value, compressed...), nil
	}
	for len(compressed) > 0 {
		n := min(chunkSize, len(compressed))
		chunks = append(chunks, compressed[:n])
		compressed = compressed[n:]
	}
	return value, chunks
}

// metaGuess is a generous size of m's JSON: the fixed names and numbers, the strings, and
// the headers with room for escapes.
func metaGuess(m *Meta) int {
	n := 160 + len(m.URL) + len(m.FinalURL) + len(m.ContentType)
	for k, vs := range m.ResponseHeaders {
		n += 8 + len(k)
		for _, v := range vs {
			n += 4 + len(v)
		}
	}
	return n + n/8
}

// DecodeHead returns the format and metadata of value and, for an Inline value, the
// compressed body.
func DecodeHead(value []byte) (format byte, m Meta, compressed []byte, err error) {
	if len(value) == 0 || (value[0] != Inline && value[0] != Chunked) {
		return 0, m, nil, fmt.Errorf("unknown page format")
	}
	n, w := binary.Uvarint(value[1:])
	if w <= 0 || n > uint64(len(value)-1-w) {
		return 0, m, nil, fmt.Errorf("bad metadata length")
	}
	end := 1 + w + int(n)
	if err := json.Unmarshal(value[1+w:end], &m); err != nil {
		return 0, m, nil, fmt.Errorf("decode metadata: %w", err)
	}
	if m.BodyBytes < 0 || m.BodyBytes > MaxBodyBytes || m.ChunkCount < 0 {
		return 0, m, nil, fmt.Errorf("bad body length %d or chunk count %d", m.BodyBytes, m.ChunkCount)
	}
	return value[0], m, value[end:], nil
}

// Page decompresses a page's body and checks it against its metadata's length and its
// key's hash.
func (c *Codec) Page(key string, m Meta, compressed []byte) (*downloader.Page, error) {
	body, err := c.dec.DecodeAll(compressed, make([]byte, 0, m.BodyBytes))
	if err != nil {
		return nil, fmt.Errorf("decompress body: %w", err)
	}
	if len(body) != m.BodyBytes {
		return nil, fmt.Errorf("body is %d bytes, want %d", len(body), m.BodyBytes)
	}
	if Key(body) != key {
		return nil, fmt.Errorf("body does not match its hash")
	}
	return &downloader.Page{
		PageKey: key, URL: m.URL, FinalURL: m.FinalURL, ContentType: m.ContentType,
		FetchedAt: m.FetchedAt, ResponseHeaders: m.ResponseHeaders, Body: body,
	}, nil
}

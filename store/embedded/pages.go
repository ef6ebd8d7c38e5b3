package embedded

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"downloader"
	"downloader/store/keys"
)

const pagePrefix = keys.PageContent

// pageFormat is the first byte of a page value: metadata JSON then a zstd frame.
const pageFormat byte = 1

// pageMeta is the stored metadata of a page. BodyBytes is the uncompressed length, checked
// on read together with the hash.
type pageMeta struct {
	URL         string    `json:"url"`
	FinalURL    string    `json:"final_url"`
	ContentType string    `json:"content_type"`
	FetchedAt   time.Time `json:"fetched_at"`
	BodyBytes   int       `json:"body_bytes"`
}

// PutPage stores p's body under its content hash and returns the key (the lower-case hex
// SHA-256 of the body). A body already stored is not written again: the first page stored
// with a body keeps its metadata (url, final_url, content_type, fetched_at). It returns
// once the page is durable.
func (s *Store) PutPage(ctx context.Context, p *downloader.Page) (string, error) {
	if p == nil {
		return "", downloader.Invalidf("page", "page is required")
	}
	sum := sha256.Sum256(p.Body)
	key := hex.EncodeToString(sum[:])
	dbKey := []byte(pagePrefix + key)

	release, err := s.acquire(ctx, "put page")
	if err != nil {
		return "", err
	}
	defer release()

	// Most repeated bodies are caught here, before paying for compression.
	if ok, err := s.has(dbKey); err != nil || ok {
		return key, err
	}
	v, err := s.encodePage(p)
	if err != nil {
		return "", err
	}
	mu := &s.pageLocks[int(sum[0])%len(s.pageLocks)]
	mu.Lock()
	defer mu.Unlock()
	if ok, err := s.has(dbKey); err != nil || ok {
		return key, err
	}
	if err := s.db.Set(dbKey, v, s.opts.pageWrite); err != nil {
		return "", fmt.Errorf("embedded store: put page %s: %w", key, err)
	}
	s.pageWriteCount.Add(1)
	return key, nil
}

// Page returns the page stored under key, or an ENOTFOUND error when there is none
// (including for a string that cannot be a page key).
func (s *Store) Page(ctx context.Context, key string) (*downloader.Page, error) {
	if len(key) != 2*sha256.Size || !isLowerHex(key) {
		return nil, downloader.Errorf(downloader.ENOTFOUND, "page %q not found", key)
	}
	release, err := s.acquire(ctx, "get page")
	if err != nil {
		return nil, err
	}
	defer release()
	v, ok, err := s.get([]byte(pagePrefix + key))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, downloader.Errorf(downloader.ENOTFOUND, "page %q not found", key)
	}
	p, err := s.decodePage(v)
	if err != nil {
		return nil, fmt.Errorf("embedded store: page %s: %w", key, err)
	}
	if sum := sha256.Sum256(p.Body); hex.EncodeToString(sum[:]) != key {
		return nil, fmt.Errorf("embedded store: page %s: body does not match its hash", key)
	}
	p.PageKey = key
	return p, nil
}

func (s *Store) encodePage(p *downloader.Page) ([]byte, error) {
	meta, err := json.Marshal(pageMeta{
		URL:         p.URL,
		FinalURL:    p.FinalURL,
		ContentType: p.ContentType,
		FetchedAt:   p.FetchedAt.UTC(),
		BodyBytes:   len(p.Body),
	})
	if err != nil {
		return nil, fmt.Errorf("embedded store: encode page metadata: %w", err)
	}
	v := make([]byte, 0, 1+binary.MaxVarintLen64+len(meta)+len(p.Body)/4+64)
	v = append(v, pageFormat)
	v = binary.AppendUvarint(v, uint64(len(meta)))
	v = append(v, meta...)
	return s.enc.EncodeAll(p.Body, v), nil
}

func (s *Store) decodePage(v []byte) (*downloader.Page, error) {
	if len(v) == 0 || v[0] != pageFormat {
		return nil, fmt.Errorf("unknown page format")
	}
	n, w := binary.Uvarint(v[1:])
	if w <= 0 || n > uint64(len(v)-1-w) {
		return nil, fmt.Errorf("bad metadata length")
	}
	metaEnd := 1 + w + int(n)
	var m pageMeta
	if err := json.Unmarshal(v[1+w:metaEnd], &m); err != nil {
		return nil, fmt.Errorf("decode metadata: %w", err)
	}
	if m.BodyBytes < 0 || m.BodyBytes > maxDecodedPageBytes {
		return nil, fmt.Errorf("bad body length %d", m.BodyBytes)
	}
	body, err := s.dec.DecodeAll(v[metaEnd:], make([]byte, 0, m.BodyBytes))
	if err != nil {
		return nil, fmt.Errorf("decompress body: %w", err)
	}
	if len(body) != m.BodyBytes {
		return nil, fmt.Errorf("body is %d bytes, want %d", len(body), m.BodyBytes)
	}
	return &downloader.Page{
		URL:         m.URL,
		FinalURL:    m.FinalURL,
		ContentType: m.ContentType,
		FetchedAt:   m.FetchedAt,
		Body:        body,
	}, nil
}

func isLowerHex(s string) bool { return keys.IsLowerHex(s) }

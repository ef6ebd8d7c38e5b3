package tikv

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader"
	"downloader/store/keys"
)

// Page value formats (the first byte of page:content:{sha256}).
const (
	pageInline  byte = 1 // metadata, then the compressed body (as the embedded store)
	pageChunked byte = 2 // metadata only; the compressed body is in ChunkCount chunks
)

// chunkSize bounds the compressed body kept in one value. TiKV is at its best with small
// values, and a raft entry is at most 8 MiB by default while a page may be 10 MiB.
const chunkSize = 256 << 10

// pageMeta is the stored metadata of a page. BodyBytes is the uncompressed length, checked
// on read together with the hash.
type pageMeta struct {
	URL         string    `json:"url"`
	FinalURL    string    `json:"final_url"`
	ContentType string    `json:"content_type"`
	FetchedAt   time.Time `json:"fetched_at"`
	BodyBytes   int       `json:"body_bytes"`
	ChunkCount  int       `json:"chunk_count,omitempty"`
}

func chunkKey(key string, n int) []byte {
	return fmt.Appendf(nil, "%s%s:%04x", keys.PageContent, key, n)
}

// PutPage stores p's body under its content hash and returns the key (the lower-case hex
// SHA-256 of the body). A body already stored is not written again: the first page stored
// with a body keeps its metadata. Two instances storing one body at once both get the key;
// the transaction that commits second fails on the conflict, sees the page and writes
// nothing.
func (s *Store) PutPage(ctx context.Context, p *downloader.Page) (string, error) {
	if p == nil {
		return "", downloader.Invalidf("page", "page is required")
	}
	sum := sha256.Sum256(p.Body)
	key := hex.EncodeToString(sum[:])
	headKey := []byte(keys.PageContent + key)

	// Most repeated bodies are caught here, before paying for compression.
	exists, err := s.hasPage(ctx, headKey)
	if err != nil || exists {
		return key, err
	}
	values := s.encodePage(p) // outside the operation's time bound: it is our CPU, not TiKV
	size := 0
	for _, v := range values {
		size += len(v)
	}
	ctx, release, err := s.acquireFor(ctx, "put page", time.Duration(size>>20)*time.Second)
	if err != nil {
		return "", err
	}
	defer release()
	err = s.update(ctx, func(txn *transaction.KVTxn) error {
		if _, err := txn.Get(ctx, headKey); !isNotFound(err) {
			if err != nil {
				return err
			}
			return errPageExists
		}
		for i, v := range values {
			k := headKey
			if i > 0 {
				k = chunkKey(key, i-1)
			}
			if err := txn.Set(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errPageExists) {
		return "", unavailable("put page "+key, err)
	}
	return key, nil
}

// hasPage reports whether the page's head key exists.
func (s *Store) hasPage(ctx context.Context, headKey []byte) (bool, error) {
	ctx, release, err := s.acquire(ctx, "put page")
	if err != nil {
		return false, err
	}
	defer release()
	_, ok, err := s.get(ctx, headKey)
	if err != nil {
		return false, unavailable("put page", err)
	}
	return ok, nil
}

// errPageExists ends PutPage's transaction when another one stored the body first.
var errPageExists = errors.New("page exists")

// Page returns the page stored under key, or an ENOTFOUND error when there is none
// (including for a string that cannot be a page key).
func (s *Store) Page(ctx context.Context, key string) (*downloader.Page, error) {
	if len(key) != 2*sha256.Size || !keys.IsLowerHex(key) {
		return nil, downloader.Errorf(downloader.ENOTFOUND, "page %q not found", key)
	}
	ctx, release, err := s.acquire(ctx, "get page")
	if err != nil {
		return nil, err
	}
	defer release()
	ts, err := s.timestamp(ctx)
	if err != nil {
		return nil, unavailable("get page", err)
	}
	snap := s.kv.GetSnapshot(ts)
	head, err := snap.Get(ctx, []byte(keys.PageContent+key))
	if err != nil {
		if isNotFound(err) {
			return nil, downloader.Errorf(downloader.ENOTFOUND, "page %q not found", key)
		}
		return nil, unavailable("get page", err)
	}
	meta, body, err := decodeHead(head)
	if err != nil {
		return nil, fmt.Errorf("tikv store: page %s: %w", key, err)
	}
	if head[0] == pageChunked {
		chunkKeys := make([][]byte, meta.ChunkCount)
		for i := range chunkKeys {
			chunkKeys[i] = chunkKey(key, i)
		}
		got, err := snap.BatchGet(ctx, chunkKeys)
		if err != nil {
			return nil, unavailable("get page", err)
		}
		body = nil
		for i, k := range chunkKeys {
			c, ok := got[string(k)]
			if !ok {
				return nil, fmt.Errorf("tikv store: page %s: chunk %d is missing", key, i)
			}
			body = append(body, c...)
		}
	}
	text, err := s.dec.DecodeAll(body, make([]byte, 0, meta.BodyBytes))
	if err != nil {
		return nil, fmt.Errorf("tikv store: page %s: decompress body: %w", key, err)
	}
	if len(text) != meta.BodyBytes {
		return nil, fmt.Errorf("tikv store: page %s: body is %d bytes, want %d", key, len(text), meta.BodyBytes)
	}
	if sum := sha256.Sum256(text); hex.EncodeToString(sum[:]) != key {
		return nil, fmt.Errorf("tikv store: page %s: body does not match its hash", key)
	}
	return &downloader.Page{
		PageKey: key, URL: meta.URL, FinalURL: meta.FinalURL, ContentType: meta.ContentType,
		FetchedAt: meta.FetchedAt, Body: text,
	}, nil
}

// encodePage returns the head value, then the chunks when the compressed body does not
// fit in the head.
func (s *Store) encodePage(p *downloader.Page) [][]byte {
	compressed := s.enc.EncodeAll(p.Body, nil)
	m := pageMeta{
		URL: p.URL, FinalURL: p.FinalURL, ContentType: p.ContentType,
		FetchedAt: p.FetchedAt.UTC(), BodyBytes: len(p.Body),
	}
	format := pageInline
	if len(compressed) > chunkSize {
		format = pageChunked
		m.ChunkCount = (len(compressed) + chunkSize - 1) / chunkSize
	}
	meta, _ := json.Marshal(m) // plain strings, a time and ints: cannot fail
	head := make([]byte, 0, 1+binary.MaxVarintLen64+len(meta)+len(compressed))
	head = append(head, format)
	head = binary.AppendUvarint(head, uint64(len(meta)))
	head = append(head, meta...)
	if format == pageInline {
		return [][]byte{append(head, compressed...)}
	}
	values := [][]byte{head}
	for len(compressed) > 0 {
		n := min(chunkSize, len(compressed))
		values = append(values, compressed[:n])
		compressed = compressed[n:]
	}
	return values
}

// decodeHead returns the metadata and, for an inline page, the compressed body.
func decodeHead(v []byte) (pageMeta, []byte, error) {
	var m pageMeta
	if len(v) == 0 || (v[0] != pageInline && v[0] != pageChunked) {
		return m, nil, fmt.Errorf("unknown page format")
	}
	n, w := binary.Uvarint(v[1:])
	if w <= 0 || n > uint64(len(v)-1-w) {
		return m, nil, fmt.Errorf("bad metadata length")
	}
	end := 1 + w + int(n)
	if err := json.Unmarshal(v[1+w:end], &m); err != nil {
		return m, nil, fmt.Errorf("decode metadata: %w", err)
	}
	if m.BodyBytes < 0 || m.BodyBytes > maxDecodedPageBytes || m.ChunkCount < 0 || m.ChunkCount > maxDecodedPageBytes/chunkSize {
		return m, nil, fmt.Errorf("bad body length %d or chunk count %d", m.BodyBytes, m.ChunkCount)
	}
	return m, v[end:], nil
}

package embedded

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"downloader"
	"downloader/store/keys"
	"downloader/store/pagevalue"
)

const pagePrefix = keys.PageContent

// Pages are stored in package pagevalue's Inline format: the whole value in one key.

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
	v, _ := s.codec.Encode(p, 0)
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
	format, m, compressed, err := pagevalue.DecodeHead(v)
	if err == nil && format != pagevalue.Inline {
		err = fmt.Errorf("unknown page format")
	}
	if err != nil {
		return nil, fmt.Errorf("embedded store: page %s: %w", key, err)
	}
	p, err := s.codec.Page(key, m, compressed)
	if err != nil {
		return nil, fmt.Errorf("embedded store: page %s: %w", key, err)
	}
	return p, nil
}

func isLowerHex(s string) bool { return keys.IsLowerHex(s) }

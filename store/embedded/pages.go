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
// once the page is durable, and records it as its URL's latest (pageindex.go). Entry A's
// pages are committed with their task's report instead (StageTaskEnd).
func (s *Store) PutPage(ctx context.Context, p *downloader.Page) (string, error) {
	if p == nil {
		return "", downloader.Invalidf("page", "page is required")
	}
	key, err := s.putPage(ctx, p)
	if err != nil {
		return key, err
	}
	return key, s.indexPage(ctx, p, key)
}

func (s *Store) putPage(ctx context.Context, p *downloader.Page) (string, error) {
	sum := sha256.Sum256(p.Body)
	key := hex.EncodeToString(sum[:])
	dbKey := []byte(pagePrefix + key)

	release, err := s.acquire(ctx, "put page")
	if err != nil {
		return "", err
	}
	defer release()

	// Register the write before looking the body up, so that one lookup serves: a write
	// of the same body that ended before this registration is committed (visible to it),
	// one still running is waited for. A repeated body is caught before compression.
	w, first, mayExist := s.startPageWrite(key, &sum)
	if !first {
		// The same body is being written now: it is durable when that write is.
		select {
		case <-w.done:
			return key, w.err
		case <-ctx.Done():
			return "", fmt.Errorf("embedded store: put page %s: %w", key, ctx.Err())
		}
	}
	// The filter (pagefilter.go) knows every page stored or being written: a body it has
	// not seen skips the lookup.
	if !mayExist {
		s.pageLookupSkipCount.Add(1)
	} else if ok, err := s.has(dbKey); err != nil || ok {
		w.err = err
		s.endPageWrite(key, w)
		return key, err
	}
	v, _ := s.codec.Encode(p, 0)
	if err := s.db.Set(dbKey, v, s.opts.pageWrite); err != nil {
		w.err = fmt.Errorf("embedded store: put page %s: %w", key, err)
	} else {
		s.pageWriteCount.Add(1)
	}
	s.endPageWrite(key, w)
	if w.err != nil {
		return "", w.err
	}
	return key, nil
}

// pageWrite is one page being written; done is closed when err is set.
type pageWrite struct {
	done chan struct{}
	err  error
}

// startPageWrite registers a write of key (the hex of sum), or returns the one in progress
// (first false). mayExist is false when the page filter says the page is certainly not
// stored, so that the caller need not look it up.
func (s *Store) startPageWrite(key string, sum *[32]byte) (w *pageWrite, first, mayExist bool) {
	s.pageMu.Lock()
	defer s.pageMu.Unlock()
	if w := s.pageWrites[key]; w != nil {
		return w, false, true
	}
	mayExist = s.pageMayExistLocked(sum) // before registering: a build then leaves key out
	w = &pageWrite{done: make(chan struct{})}
	s.pageWrites[key] = w
	return w, true, mayExist
}

// endPageWrite removes w (now durable or failed) and wakes those waiting for it.
func (s *Store) endPageWrite(key string, w *pageWrite) {
	s.pageMu.Lock()
	delete(s.pageWrites, key)
	s.pageMu.Unlock()
	close(w.done)
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

package embedded

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/store/keys"
)

// The URL index of the page store: page:by_url:{sha256(url)} → the URL's latest page and
// the validators it was served with (downloader.PageRef), read by conditional requests.
// It is written without a sync of its own: losing an entry costs one unconditional fetch,
// and LatestPage answers only an entry whose page is stored.

// indexPage records p's key as its URL's latest page, or removes the URL's entry when p
// has no validators (an old validator must not be sent for a newer page).
func (s *Store) indexPage(ctx context.Context, p *downloader.Page, key string) error {
	release, err := s.acquire(ctx, "index page")
	if err != nil {
		return err
	}
	defer release()
	k := keys.PageByURLKey(p.URL)
	if p.Validators.IsZero() {
		if err := s.db.Delete(k, pebble.NoSync); err != nil {
			return fmt.Errorf("embedded store: unindex page of %s: %w", p.URL, err)
		}
		return nil
	}
	v, err := json.Marshal(downloader.PageRef{PageKey: key, Validators: p.Validators})
	if err != nil {
		return fmt.Errorf("embedded store: index page of %s: %w", p.URL, err)
	}
	s.urls.add(p.URL)
	if err := s.db.Set(k, v, pebble.NoSync); err != nil {
		return fmt.Errorf("embedded store: index page of %s: %w", p.URL, err)
	}
	return nil
}

// LatestPage returns the page last stored for url with validators, when that page is
// stored. A URL never indexed is answered from memory (urlFilter).
func (s *Store) LatestPage(ctx context.Context, url string) (downloader.PageRef, bool, error) {
	release, err := s.acquire(ctx, "latest page")
	if err != nil {
		return downloader.PageRef{}, false, err
	}
	defer release()
	if !s.urls.mayHave(url) {
		s.urlLookupSkipCount.Add(1)
		return downloader.PageRef{}, false, nil
	}
	v, ok, err := s.get(keys.PageByURLKey(url))
	if err != nil || !ok {
		return downloader.PageRef{}, false, err
	}
	var ref downloader.PageRef
	if err := json.Unmarshal(v, &ref); err != nil || !keys.IsLowerHex(ref.PageKey) || ref.Validators.IsZero() {
		return downloader.PageRef{}, false, nil // not ours to trust: fetch in full
	}
	stored, err := s.has([]byte(pagePrefix + ref.PageKey))
	if err != nil || !stored {
		return downloader.PageRef{}, false, err
	}
	return ref, true, nil
}

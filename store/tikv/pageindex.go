package tikv

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader"
	"downloader/store/keys"
)

// The URL index of the page store: page:by_url:{sha256(url)} → the URL's latest page and
// the validators it was served with (downloader.PageRef), read by conditional requests.
// Written in a transaction of its own after the page's: LatestPage answers only an entry
// whose page is stored, and a lost entry costs one unconditional fetch.

// indexPage records p's key as its URL's latest page, or removes the URL's entry when p
// has no validators (an old validator must not be sent for a newer page).
func (s *Store) indexPage(ctx context.Context, p *downloader.Page, key string) error {
	k := keys.PageByURLKey(p.URL)
	var v []byte
	if !p.Validators.IsZero() {
		var err error
		if v, err = json.Marshal(downloader.PageRef{PageKey: key, Validators: p.Validators}); err != nil {
			return fmt.Errorf("tikv store: index page of %s: %w", p.URL, err)
		}
	}
	ctx, release, err := s.acquire(ctx, "index page")
	if err != nil {
		return err
	}
	defer release()
	err = s.update(ctx, func(txn *transaction.KVTxn) error {
		if v == nil {
			return txn.Delete(k)
		}
		return txn.Set(k, v)
	})
	if err != nil {
		return unavailable("index page", err)
	}
	return nil
}

// LatestPage returns the page last stored for url with validators, when that page is
// stored.
func (s *Store) LatestPage(ctx context.Context, url string) (downloader.PageRef, bool, error) {
	ctx, release, err := s.acquire(ctx, "latest page")
	if err != nil {
		return downloader.PageRef{}, false, err
	}
	defer release()
	v, ok, err := s.get(ctx, keys.PageByURLKey(url))
	if err != nil {
		return downloader.PageRef{}, false, unavailable("latest page", err)
	}
	if !ok {
		return downloader.PageRef{}, false, nil
	}
	var ref downloader.PageRef
	if err := json.Unmarshal(v, &ref); err != nil || !keys.IsLowerHex(ref.PageKey) || ref.Validators.IsZero() {
		return downloader.PageRef{}, false, nil // not ours to trust: fetch in full
	}
	_, stored, err := s.get(ctx, []byte(keys.PageContent+ref.PageKey))
	if err != nil {
		return downloader.PageRef{}, false, unavailable("latest page", err)
	}
	if !stored {
		return downloader.PageRef{}, false, nil
	}
	return ref, true, nil
}

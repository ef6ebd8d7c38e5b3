package embedded

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/store/keys"
)

// A task's end (downloader.TaskEnd) is committed as one batch: its page, its fetch_result
// and, added by the keyspace that commits it, its report in the outbox or the local
// queue's change of state. One pass through Pebble's commit pipeline, and one fsync
// shared with the tasks committing at the same time (the pipeline's single writer appends
// each batch to the write-ahead log in turn and syncs them together), instead of one per
// write. The page's key, the SHA-256 of its body, is known only here: staging fills it
// into the report and the result before the caller adds the report.

// StageTaskEnd adds end's page (unless that body is stored already) with its URL's
// index entry, and end's fetch_result, to b, and fills end's page key. done must be
// called once b's commit is over, with its error: it wakes those writing the same body
// meanwhile, who wait for this commit. Call it between Acquire and release.
func (k *Keyspace) StageTaskEnd(ctx context.Context, b *pebble.Batch, end *downloader.TaskEnd) (done func(err error), err error) {
	return k.s.stageTaskEnd(ctx, b, end)
}

func (s *Store) stageTaskEnd(ctx context.Context, b *pebble.Batch, end *downloader.TaskEnd) (done func(err error), err error) {
	done = func(error) {}
	if end.Page != nil {
		key, w, err := s.stagePage(ctx, b, end.Page)
		if err != nil {
			return nil, err
		}
		end.SetPageKey(key)
		if w != nil {
			done = func(err error) {
				if err == nil {
					s.pageWriteCount.Add(1)
				} else {
					w.err = fmt.Errorf("embedded store: put page %s: %w", key, err)
				}
				s.endPageWrite(key, w)
			}
		}
		if err := s.stagePageIndex(b, end.Page, key); err != nil {
			done(err)
			return nil, err
		}
	}
	if r := end.Result; r != nil {
		buf := s.resultBuf()
		defer s.resultBufs.Put(buf)
		v, err := encodeFetchResult((*buf)[:0], r)
		*buf = v[:0:cap(v)]
		if err == nil {
			err = s.addFetchResult(b, r.Domain, r.FetchedAt.UTC(), v)
		}
		if err != nil {
			done(err)
			return nil, err
		}
	}
	return done, nil
}

// stagePage adds p to b unless its body is stored already, and returns its key and, when
// it was added, the write registered for it (endPageWrite once committed). A write of the
// same body in progress is waited for: the body is durable when that write is.
func (s *Store) stagePage(ctx context.Context, b *pebble.Batch, p *downloader.Page) (string, *pageWrite, error) {
	sum := sha256.Sum256(p.Body)
	key := hex.EncodeToString(sum[:])
	dbKey := []byte(pagePrefix + key)
	w, first, mayExist := s.startPageWrite(key, &sum)
	if !first {
		select {
		case <-w.done:
			return key, nil, w.err
		case <-ctx.Done():
			return "", nil, fmt.Errorf("embedded store: put page %s: %w", key, ctx.Err())
		}
	}
	if !mayExist {
		s.pageLookupSkipCount.Add(1)
	} else if ok, err := s.has(dbKey); err != nil || ok {
		w.err = err
		s.endPageWrite(key, w)
		return key, nil, err
	}
	v, _ := s.codec.Encode(p, 0)
	if err := b.Set(dbKey, v, nil); err != nil {
		w.err = fmt.Errorf("embedded store: put page %s: %w", key, err)
		s.endPageWrite(key, w)
		return "", nil, w.err
	}
	return key, w, nil
}

// stagePageIndex adds to b the URL index entry of p stored under key (pageindex.go).
func (s *Store) stagePageIndex(b *pebble.Batch, p *downloader.Page, key string) error {
	k := keys.PageByURLKey(p.URL)
	if p.Validators.IsZero() {
		if err := b.Delete(k, nil); err != nil {
			return fmt.Errorf("embedded store: unindex page of %s: %w", p.URL, err)
		}
		return nil
	}
	v, err := json.Marshal(downloader.PageRef{PageKey: key, Validators: p.Validators})
	if err == nil {
		s.urls.add(p.URL) // before the commit: the filter never says no for a stored entry
		err = b.Set(k, v, nil)
	}
	if err != nil {
		return fmt.Errorf("embedded store: index page of %s: %w", p.URL, err)
	}
	return nil
}

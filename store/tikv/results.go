package tikv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"downloader"
	"downloader/store/keys"
)

// PutFetchResult appends r. r.FetchedAt must be set (records are ordered by it). It
// returns once the record and its index entry are committed.
func (s *Store) PutFetchResult(ctx context.Context, r *downloader.FetchResult) error {
	if r == nil {
		return downloader.Invalidf("fetch_result", "fetch_result is required")
	}
	if r.FetchedAt.Before(keys.MinFetchedAt) || r.FetchedAt.After(keys.MaxFetchedAt) {
		return downloader.Invalidf("fetched_at", "fetched_at %s is out of range", r.FetchedAt.Format(time.RFC3339Nano))
	}
	rec := *r
	rec.FetchedAt = rec.FetchedAt.UTC()
	v, err := json.Marshal(&rec)
	if err != nil {
		return fmt.Errorf("tikv store: encode fetch result: %w", err)
	}
	ctx, release, err := s.acquire(ctx, "put fetch result")
	if err != nil {
		return err
	}
	defer release()

	txn, err := s.begin(ctx)
	if err != nil {
		return unavailable("put fetch result", err)
	}
	// The transaction's start timestamp is unique across the cluster: no retry can collide.
	id := keys.ResultID(rec.FetchedAt, txn.StartTS())
	if err := txn.Set(keys.ResultKey(id), v); err != nil {
		_ = txn.Rollback()
		return fmt.Errorf("tikv store: put fetch result: %w", err)
	}
	if rec.Domain != "" {
		// The index value is not empty: TiKV treats an empty value as a delete.
		if err := txn.Set(keys.ByDomainKey(rec.Domain, id), indexValue); err != nil {
			_ = txn.Rollback()
			return fmt.Errorf("tikv store: put fetch result index: %w", err)
		}
	}
	if err := txn.Commit(ctx); err != nil {
		return unavailable("put fetch result", err)
	}
	return nil
}

// indexValue is the value of an index entry (its key says everything).
var indexValue = []byte{1}

// FetchResults lists results newest first (by fetched_at; on a tie the later insertion
// first), only those of domain unless it is empty, starting after cursor ("" for the first
// page). The returned cursor is "" after the last page. A page is read at one snapshot;
// records appended while a caller pages never cause a duplicate or a gap, because the
// cursor is a position in a fixed order.
//
// limit 0 means 100; a limit outside 1..1000 or a cursor this store did not hand out is an
// EINVALID error naming "limit" or "cursor".
func (s *Store) FetchResults(ctx context.Context, domain string, limit int, cursor string) ([]downloader.FetchResult, string, error) {
	switch {
	case limit == 0:
		limit = keys.DefaultLimit
	case limit < 1 || limit > keys.MaxLimit:
		return nil, "", downloader.Invalidf("limit", "limit must be between 1 and %d", keys.MaxLimit)
	}
	if cursor != "" && !keys.ValidID(cursor) {
		return nil, "", downloader.Invalidf("cursor", "cursor is not valid")
	}
	ctx, release, err := s.acquire(ctx, "list fetch results")
	if err != nil {
		return nil, "", err
	}
	defer release()

	ts, err := s.timestamp(ctx)
	if err != nil {
		return nil, "", unavailable("list fetch results", err)
	}
	snap := s.kv.GetSnapshot(ts)
	prefix := keys.FetchResult
	if domain != "" {
		prefix = keys.ByDomainPrefix(domain)
	}
	lower := []byte(prefix)
	if cursor != "" {
		// Keys under prefix are prefix+id with ids of one length, so prefix+cursor+"\x00"
		// sorts right after the cursor's key and before the next id.
		lower = append(append(lower, cursor...), 0)
	}
	if limit+1 < 256 {
		snap.SetScanBatchSize(limit + 1)
	}
	type page struct {
		ids    []string
		values [][]byte
	}
	pg, err := scanWithin(ctx, snap, func() (page, error) {
		it, err := snap.Iter(lower, keys.PrefixEnd(prefix))
		if err != nil {
			return page{}, unavailable("list fetch results", err)
		}
		defer it.Close()
		pg := page{ids: make([]string, 0, limit+1), values: make([][]byte, 0, limit+1)}
		for it.Valid() && len(pg.ids) < limit+1 {
			k := it.Key()
			if len(k) != len(prefix)+keys.IDLen {
				return page{}, fmt.Errorf("tikv store: unexpected key %q under %q", k, prefix)
			}
			pg.ids = append(pg.ids, string(k[len(prefix):]))
			if domain == "" {
				pg.values = append(pg.values, append([]byte(nil), it.Value()...))
			}
			if err := it.Next(); err != nil {
				return page{}, unavailable("list fetch results", err)
			}
		}
		return pg, nil
	})
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, "", unavailable("list fetch results", err)
	}
	if err != nil {
		return nil, "", err
	}
	ids, values := pg.ids, pg.values
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = ids[limit-1]
	}
	if domain != "" {
		// By domain, the scan read index entries: read the records at the same snapshot.
		recKeys := make([][]byte, len(ids))
		for i, id := range ids {
			recKeys[i] = keys.ResultKey(id)
		}
		got, err := snap.BatchGet(ctx, recKeys)
		if err != nil {
			return nil, "", unavailable("list fetch results", err)
		}
		values = values[:0]
		for i, k := range recKeys {
			v, ok := got[string(k)]
			if !ok {
				// The index and the record are written in one transaction: this is corruption.
				return nil, "", fmt.Errorf("tikv store: fetch result %s is indexed but missing", ids[i])
			}
			values = append(values, v)
		}
	}
	out := make([]downloader.FetchResult, len(ids))
	for i := range ids {
		if err := json.Unmarshal(values[i], &out[i]); err != nil {
			return nil, "", fmt.Errorf("tikv store: decode fetch result %s: %w", ids[i], err)
		}
	}
	return out, next, nil
}

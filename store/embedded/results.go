package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/store/keys"
)

// The key layout, paging bounds and id scheme are shared with the TiKV store (package
// keys); these names keep this package's code short.
const (
	defaultLimit   = keys.DefaultLimit
	maxLimit       = keys.MaxLimit
	resultPrefix   = keys.FetchResult
	byDomainPrefix = keys.FetchResultByDomain
	idLen          = keys.IDLen
)

// The range of fetched_at a record may have: its nanoseconds must fit the id.
var (
	minFetchedAt = keys.MinFetchedAt
	maxFetchedAt = keys.MaxFetchedAt
)

// PutFetchResult appends r. r.FetchedAt must be set (records are ordered by it). It
// returns once the record is durable.
func (s *Store) PutFetchResult(ctx context.Context, r *downloader.FetchResult) error {
	buf := s.resultBuf()
	defer s.resultBufs.Put(buf)
	v, err := encodeFetchResult((*buf)[:0], r)
	if err != nil {
		return err
	}
	*buf = v
	release, err := s.acquire(ctx, "put fetch result")
	if err != nil {
		return err
	}
	defer release()

	b := s.db.NewBatch()
	defer b.Close()
	if err := s.addFetchResult(b, r.Domain, r.FetchedAt.UTC(), v); err != nil {
		return err
	}
	if err := b.Commit(s.opts.resultWrite); err != nil {
		return fmt.Errorf("embedded store: put fetch result: %w", err)
	}
	return nil
}

// resultBuf returns a buffer for encodeFetchResult, to put back in s.resultBufs once the
// batch holds its copy of the value (Set copies): a result's encoding was an allocation
// per task's end.
func (s *Store) resultBuf() *[]byte {
	if buf, ok := s.resultBufs.Get().(*[]byte); ok {
		return buf
	}
	buf := make([]byte, 0, 512)
	return &buf
}

// encodeFetchResult checks r and returns it as stored: JSON, fetched_at in UTC.
func encodeFetchResult(b []byte, r *downloader.FetchResult) ([]byte, error) {
	if r == nil {
		return nil, downloader.Invalidf("fetch_result", "fetch_result is required")
	}
	if r.FetchedAt.Before(minFetchedAt) || r.FetchedAt.After(maxFetchedAt) {
		return nil, downloader.Invalidf("fetched_at", "fetched_at %s is out of range", r.FetchedAt.Format(time.RFC3339Nano))
	}
	rec := *r
	rec.FetchedAt = rec.FetchedAt.UTC()
	// The stored form (FetchResult.AppendStoredJSON): json.Marshal's bytes without the
	// null and zero fields, which FetchResults' decode gives back as they were. A plain
	// fetch's result is 350–450 bytes so, against 700–850 in full (ten null render counts
	// and a null fail_reason among them). It appends to b.
	v, err := rec.AppendStoredJSON(b)
	if err != nil {
		return nil, fmt.Errorf("embedded store: encode fetch result: %w", err)
	}
	return v, nil
}

// addFetchResult adds to b the record v (a FetchResult as JSON) and its index entry.
func (s *Store) addFetchResult(b *pebble.Batch, domain string, fetchedAt time.Time, v []byte) error {
	id := s.nextID(fetchedAt)
	if err := b.Set(resultKey(id), v, nil); err != nil {
		return fmt.Errorf("embedded store: put fetch result: %w", err)
	}
	if domain != "" {
		if err := b.Set(byDomainKey(domain, id), nil, nil); err != nil {
			return fmt.Errorf("embedded store: put fetch result index: %w", err)
		}
	}
	return nil
}

// FetchResults lists results newest first (by fetched_at; on a tie the later insertion
// first), only those of domain unless it is empty, starting after cursor ("" for the first
// page). The returned cursor is "" after the last page. Records appended while a caller
// pages never cause a duplicate or a gap: the cursor is a position in a fixed order, and a
// new record lands either before it (not seen by this walk) or after it (seen once).
//
// limit 0 means 100; a limit outside 1..1000 or a cursor this store did not hand out is an
// EINVALID error naming "limit" or "cursor".
func (s *Store) FetchResults(ctx context.Context, domain string, limit int, cursor string) ([]downloader.FetchResult, string, error) {
	switch {
	case limit == 0:
		limit = defaultLimit
	case limit < 1 || limit > maxLimit:
		return nil, "", downloader.Invalidf("limit", "limit must be between 1 and %d", maxLimit)
	}
	if cursor != "" && !validID(cursor) {
		return nil, "", downloader.Invalidf("cursor", "cursor is not valid")
	}
	release, err := s.acquire(ctx, "list fetch results")
	if err != nil {
		return nil, "", err
	}
	defer release()

	// Unfiltered, the scan reads the records themselves; by domain, it reads index entries
	// and each record is then a point read.
	prefix := resultPrefix
	if domain != "" {
		prefix = byDomainPrefix + escapeDomain(domain) + ":"
	}
	entries, err := s.scan(ctx, prefix, cursor, limit+1, domain == "")
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(entries) > limit {
		entries = entries[:limit]
		next = entries[limit-1].id
	}
	out := make([]downloader.FetchResult, len(entries))
	for i, e := range entries {
		v := e.value
		if domain != "" {
			var ok bool
			v, ok, err = s.get(resultKey(e.id))
			if err != nil {
				return nil, "", err
			}
			if !ok {
				// The index and the record are written in one batch; this is corruption.
				return nil, "", fmt.Errorf("embedded store: fetch result %s is indexed but missing", e.id)
			}
		}
		if err := json.Unmarshal(v, &out[i]); err != nil {
			return nil, "", fmt.Errorf("embedded store: decode fetch result %s: %w", e.id, err)
		}
	}
	return out, next, nil
}

// scanEntry is one key found by scan: the record id its key ends in, and its value when
// asked for.
type scanEntry struct {
	id    string
	value []byte
}

// scan returns up to n entries under prefix (whose keys end in a record id), in key order,
// starting after the id after ("" for the beginning), with copies of their values if
// withValues.
func (s *Store) scan(ctx context.Context, prefix, after string, n int, withValues bool) ([]scanEntry, error) {
	lower := []byte(prefix)
	if after != "" {
		// All keys under prefix are prefix+id with ids of one length, so prefix+after+"\x00"
		// sorts right after prefix+after and before the next id.
		lower = append(append(lower, after...), 0)
	}
	iter, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: lower,
		UpperBound: prefixEnd(prefix),
	})
	if err != nil {
		return nil, fmt.Errorf("embedded store: scan %q: %w", prefix, err)
	}
	entries := make([]scanEntry, 0, n)
	for ok := iter.First(); ok && len(entries) < n; ok = iter.Next() {
		k := iter.Key()
		if len(k) != len(prefix)+idLen {
			_ = iter.Close()
			return nil, fmt.Errorf("embedded store: unexpected key %q under %q", k, prefix)
		}
		e := scanEntry{id: string(k[len(prefix):])}
		if withValues {
			v, err := iter.ValueAndErr()
			if err != nil {
				_ = iter.Close()
				return nil, fmt.Errorf("embedded store: scan %q: %w", prefix, err)
			}
			e.value = append([]byte(nil), v...)
		}
		entries = append(entries, e)
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("embedded store: scan %q: %w", prefix, err)
	}
	return entries, nil
}

// nextID returns the id of a new record fetched at t. Ids are unique as long as no two
// records share both fetched_at (to the nanosecond) and the sequence number; the sequence
// starts at the wall-clock nanoseconds of Open and grows by one per record, so a restart
// continues above the previous run unless the clock went back by more than that run
// lasted and a record then also carries the same fetched_at nanosecond.
func (s *Store) nextID(t time.Time) string {
	return keys.ResultID(t, s.seq.Add(1))
}

func validID(id string) bool { return keys.ValidID(id) }

func resultKey(id string) []byte { return keys.ResultKey(id) }

func byDomainKey(domain, id string) []byte { return keys.ByDomainKey(domain, id) }

// escapeDomain percent-encodes '%' and ':' so that a domain is one key segment
// (keys.EscapeDomain).
func escapeDomain(d string) string { return keys.EscapeDomain(d) }

// prefixEnd returns the smallest key greater than every key that starts with prefix
// (keys.PrefixEnd).
func prefixEnd(prefix string) []byte { return keys.PrefixEnd(prefix) }

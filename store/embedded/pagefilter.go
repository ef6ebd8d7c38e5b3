package embedded

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"downloader/store/keys"
)

// pageFilter is an in-memory Bloom filter of the page keys stored or being written, so that
// PutPage can skip the point lookup (a Pebble Get that misses, through the memtables and
// every level's SSTables) for a body it has never seen. It may say "maybe" for a body
// never stored (a false positive, about 1 % at its load bound, or a page whose write
// failed): PutPage then does the real lookup, as it always did. It never says "no" for a
// page that is stored or being written, which is what keeps deduplication exact:
//
//   - it is built (lazily, by the first PutPage after Open, and again when it reaches its
//     load bound) from a scan of the stored page keys plus the writes registered in
//     pageWrites, all under pageMu: a write that ended before the scan's iterator was
//     created is committed and seen by it, one that has not ended is in pageWrites;
//   - every later write adds its key under pageMu when it registers (startPageWrite),
//     before it commits.
//
// It lives in memory only: a restart starts without one and rebuilds it from what is
// durable, so a crash cannot leave it behind the store. Pages are never deleted one by
// one; a key that went away would only be a false positive.
type pageFilter struct {
	bits  []uint64
	mask  uint64 // len(bits)*64 - 1; the bit count is a power of two
	count int    // keys added
	limit int    // keys it holds at about 1 % false positives; past it, rebuilt bigger
}

const (
	pageFilterBitsPerKey = 10 // about 1 % false positives with pageFilterProbes
	pageFilterProbes     = 7
	pageFilterMinKeys    = 1 << 16
	// pageFilterMaxBits bounds the filter's memory (64 MiB, about 50 million pages);
	// past it no filter is kept and every PutPage looks its body up.
	pageFilterMaxBits = 1 << 29
)

// newPageFilter returns an empty filter for at least keyCount keys, or nil when that would
// pass pageFilterMaxBits.
func newPageFilter(keyCount int) *pageFilter {
	want := uint64(max(keyCount, pageFilterMinKeys)) * pageFilterBitsPerKey
	n := uint64(64)
	for n < want {
		n <<= 1
	}
	if n > pageFilterMaxBits {
		return nil
	}
	return &pageFilter{bits: make([]uint64, n/64), mask: n - 1, limit: int(n / pageFilterBitsPerKey)}
}

// probes derives the filter's two hashes from the body's SHA-256, already uniform
// (double hashing: probe i is h1 + i·h2).
func probes(sum *[32]byte) (h1, h2 uint64) {
	return binary.LittleEndian.Uint64(sum[0:8]), binary.LittleEndian.Uint64(sum[8:16]) | 1
}

func (f *pageFilter) add(sum *[32]byte) {
	h1, h2 := probes(sum)
	for i := range uint64(pageFilterProbes) {
		b := (h1 + i*h2) & f.mask
		f.bits[b>>6] |= 1 << (b & 63)
	}
	f.count++
}

func (f *pageFilter) mayHave(sum *[32]byte) bool {
	h1, h2 := probes(sum)
	for i := range uint64(pageFilterProbes) {
		b := (h1 + i*h2) & f.mask
		if f.bits[b>>6]&(1<<(b&63)) == 0 {
			return false
		}
	}
	return true
}

// pageMayExistLocked reports whether the page with this hash may be stored already (false:
// it certainly is not, the lookup can be skipped) and adds it to the filter, as the caller
// is about to write it. It builds the filter first when there is none or it is full.
// Requires s.pageMu held; the caller registers the write in pageWrites next.
func (s *Store) pageMayExistLocked(sum *[32]byte) bool {
	if s.pageFilter == nil || s.pageFilter.count >= s.pageFilter.limit {
		if s.pageFilterOff {
			return true
		}
		f, err := s.buildPageFilterLocked()
		if err != nil {
			s.logger.Warn("page filter not built: pages are looked up", "error", err)
		}
		s.pageFilter = f
		if f == nil {
			// Too many pages for the bound, or the scan failed: look every body up.
			s.pageFilterOff = true
			return true
		}
	}
	may := s.pageFilter.mayHave(sum)
	s.pageFilter.add(sum)
	return may
}

// buildPageFilterLocked scans the stored page keys into a new filter sized for twice their
// count, with the writes now registered in pageWrites. Requires s.pageMu held.
func (s *Store) buildPageFilterLocked() (*pageFilter, error) {
	var sums [][32]byte
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pagePrefix), UpperBound: keys.PrefixEnd(pagePrefix)})
	if err != nil {
		return nil, fmt.Errorf("embedded store: scan pages: %w", err)
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		var sum [32]byte
		if k := iter.Key()[len(pagePrefix):]; len(k) == 64 {
			if _, err := hex.Decode(sum[:], k); err == nil {
				sums = append(sums, sum)
			}
		}
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("embedded store: scan pages: %w", err)
	}
	for k := range s.pageWrites {
		var sum [32]byte
		if _, err := hex.Decode(sum[:], []byte(k)); err == nil {
			sums = append(sums, sum)
		}
	}
	f := newPageFilter(2 * len(sums))
	if f == nil {
		return nil, nil
	}
	for i := range sums {
		f.add(&sums[i])
	}
	s.pageFilterBuildCount++
	return f, nil
}

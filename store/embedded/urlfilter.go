package embedded

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"downloader/store/keys"
)

// urlFilter holds Bloom filters of the URLs that have an entry in the page store's URL
// index (pageindex.go), so that LatestPage, asked before every stored task's fetch, can
// answer "no entry" for a URL never indexed without a Pebble Get that misses (through the
// memtables and the tables of every level). A crawl asks mostly for URLs it has never
// fetched. It never says no for a URL whose entry is stored or being written:
//
//   - it is built by Open from a scan of the index, before any write can run;
//   - every later write adds its URL before it commits (stagePageIndex, indexPage).
//
// Filters are never rebuilt, so that no write in flight can be missed by a scan: when the
// newest is full, a new one twice its size takes the new URLs and mayHave asks them all
// (each at about 1 % false positives). Entries are deleted (a page without validators)
// but stay in the filter: a false positive costs the Get it replaced. Past
// pageFilterMaxBits in all, or when the scan fails, it is off and every LatestPage reads.
// Memory only: a restart builds it again from what is durable.
type urlFilter struct {
	mu      sync.Mutex
	filters []*pageFilter // the last one takes new URLs
	bits    uint64        // bits in all filters
	isOff   bool
}

// buildURLFilter scans the URL index of db into a filter sized for twice its entries.
func buildURLFilter(db *pebble.DB) (*urlFilter, error) {
	iter, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(keys.PageByURL), UpperBound: keys.PrefixEnd(keys.PageByURL)})
	if err != nil {
		return &urlFilter{isOff: true}, fmt.Errorf("embedded store: scan the URL index: %w", err)
	}
	var sums [][32]byte
	for ok := iter.First(); ok; ok = iter.Next() {
		if sum, ok := urlKeySum(iter.Key()); ok {
			sums = append(sums, sum)
		}
	}
	if err := iter.Close(); err != nil {
		return &urlFilter{isOff: true}, fmt.Errorf("embedded store: scan the URL index: %w", err)
	}
	f := &urlFilter{}
	first := newPageFilter(2 * len(sums))
	if first == nil {
		f.isOff = true
		return f, nil
	}
	f.filters, f.bits = []*pageFilter{first}, (first.mask + 1)
	for i := range sums {
		first.add(&sums[i])
	}
	return f, nil
}

// urlKeySum is the SHA-256 a URL index key names (keys.PageByURLKey).
func urlKeySum(key []byte) (sum [32]byte, ok bool) {
	h := key[len(keys.PageByURL):]
	if len(h) != 64 {
		return sum, false
	}
	_, err := hex.Decode(sum[:], h)
	return sum, err == nil
}

func urlSum(url string) [32]byte { return sha256.Sum256([]byte(url)) }

// mayHave reports whether url may have an entry (false: it certainly has none).
func (f *urlFilter) mayHave(url string) bool {
	sum := urlSum(url)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.isOff {
		return true
	}
	for _, pf := range f.filters {
		if pf.mayHave(&sum) {
			return true
		}
	}
	return false
}

// add records url as indexed; call it before the write of its entry commits.
func (f *urlFilter) add(url string) {
	sum := urlSum(url)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.isOff {
		return
	}
	last := f.filters[len(f.filters)-1]
	if last.count >= last.limit {
		next := newPageFilter(2 * last.limit)
		if next == nil || f.bits+next.mask+1 > pageFilterMaxBits {
			f.isOff, f.filters = true, nil // every LatestPage reads from now on
			return
		}
		f.filters = append(f.filters, next)
		f.bits += next.mask + 1
		last = next
	}
	last.add(&sum)
}

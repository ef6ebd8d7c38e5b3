package observe

import (
	"cmp"
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"downloader"
	"downloader/limiter"
)

// ActiveSpan is how recently a domain must have been requested (or be in flight) to count
// as active for the politeness ceiling and the active-domain gauge.
const ActiveSpan = 5 * time.Minute

// DefaultSnapshotTTL is how long a DomainTable reuses one copy of the limiter's table.
const DefaultSnapshotTTL = 2 * time.Second

// Paging bounds of DomainTable.Page.
const (
	DefaultPageLimit = 50
	MaxPageLimit     = 500
)

// Sort keys of DomainTable.Page: the JSON names of downloader.DomainState's fields.
const (
	SortDomain         = "domain"
	SortMinInterval    = "min_interval_ms"
	SortIntervalSource = "interval_source"
	SortLastRequest    = "last_request_at"
	SortInFlight       = "in_flight_count"
	SortRequests       = "request_24h_count"
	SortState          = "state"
)

// SortKeys lists the sort keys in table column order.
func SortKeys() []string {
	return []string{SortDomain, SortMinInterval, SortIntervalSource, SortLastRequest, SortInFlight, SortRequests, SortState}
}

// row is one domain in a snapshot, compact (48 bytes) so that 10^6 domains fit in ~50 MB.
type row struct {
	domain     string
	lastNs     int64 // last_request_at, Unix ns; noRequestNs: none known
	overNs     int64 // last_over_limit_at, Unix ns; 0: never
	requests   uint32
	intervalMs int32
	inFlight   int32
	source     uint8 // index in sources
	state      uint8 // index in states
	overEntry  uint8 // index+1 in downloader.Entries; 0: never
	// isRebuild: the conservative rebuild decides the domain's next slot; the loss moment
	// (rebuild_loss_at) is one for the whole table, kept in the snapshot.
	isRebuild bool
}

// noRequestNs is the lastNs of a domain with no known request: it sorts before every
// request moment, as "never" is older than any time.
const noRequestNs = math.MinInt64

// The small sets a row stores as codes: the index in these lists, which are in
// alphabetical order so that codes sort as the names do.
func sources() []downloader.IntervalSource {
	return []downloader.IntervalSource{downloader.IntervalSourceDefault, downloader.IntervalSourceLease, downloader.IntervalSourceRequest}
}

func states() []downloader.RateState {
	return []downloader.RateState{downloader.RateStateNormal, downloader.RateStateOverLimitA, downloader.RateStateOverLimitB, downloader.RateStateOverLimitC}
}

func codeOf[T comparable](set []T, v T) uint8 {
	for i, x := range set {
		if x == v {
			return uint8(i)
		}
	}
	return 0
}

func at[T any](set []T, code uint8) T {
	if int(code) < len(set) {
		return set[code]
	}
	var zero T
	return zero
}

func rowOf(st *downloader.DomainState) row {
	r := row{
		domain: st.Domain, lastNs: noRequestNs, requests: uint32(min(st.Request24hCount, 1<<32-1)),
		intervalMs: int32(st.MinIntervalMs), inFlight: int32(st.InFlightCount),
		source: codeOf(sources(), st.IntervalSource), state: codeOf(states(), st.State),
		isRebuild: !st.RebuildLossAt.IsZero(),
	}
	if !st.LastRequestAt.IsZero() {
		r.lastNs = st.LastRequestAt.UnixNano()
	}
	if st.LastOverLimitAt != nil {
		r.overNs = st.LastOverLimitAt.UnixNano()
		r.overEntry = codeOf(downloader.Entries[:], st.LastOverLimitEntry) + 1
	}
	return r
}

func (r *row) domainState(lossAt time.Time) downloader.DomainState {
	st := downloader.DomainState{
		Domain: r.domain, MinIntervalMs: int64(r.intervalMs), IntervalSource: at(sources(), r.source),
		InFlightCount: int(r.inFlight), Request24hCount: uint64(r.requests), State: at(states(), r.state),
	}
	if r.lastNs != noRequestNs {
		st.LastRequestAt = time.Unix(0, r.lastNs).UTC()
	}
	if r.isRebuild {
		st.RebuildLossAt = lossAt
	}
	if r.overEntry != 0 {
		at := time.Unix(0, r.overNs).UTC()
		st.LastOverLimitAt = &at
		st.LastOverLimitEntry = downloader.Entries[r.overEntry-1]
	}
	return st
}

// DomainSummary are the numbers of the whole table at one moment.
type DomainSummary struct {
	SnapshotAt  time.Time `json:"snapshot_at"`
	DomainCount int       `json:"domain_count"`
	// ActiveDomainCount counts domains in flight or requested within ActiveSpan.
	ActiveDomainCount int `json:"active_domain_count"`
	// UnboundedDomainCount counts active domains with min_interval_ms = 0: nothing but the
	// global cap bounds their rate.
	UnboundedDomainCount int `json:"unbounded_domain_count"`
	// PolitenessSumPerSecond is Σ 1/min_interval over the active domains with an interval.
	PolitenessSumPerSecond float64 `json:"politeness_sum_per_second"`
}

// snapshot is one copy of the limiter's table. Immutable once built, except for the sorted
// orders, each computed once on first use.
type snapshot struct {
	at      time.Time
	rows    []row
	summary DomainSummary
	lossAt  time.Time // the rebuild_loss_at of the rows with isRebuild

	mu     sync.Mutex
	orders map[orderKey]*order
}

type orderKey struct {
	sort string
	desc bool
}

type order struct {
	once sync.Once
	perm []int32
}

// DomainTable is a sortable, searchable, pageable view of the limiter's per-domain table.
// It copies the table at most once per TTL and sorts each copy at most once per order,
// so paging through 10^5 domains costs one copy and one sort, then a binary search per
// page. Safe for concurrent use; create it with NewDomainTable.
type DomainTable struct {
	lim *limiter.Limiter
	ttl time.Duration

	mu   sync.Mutex // held while building, so concurrent callers share one build
	snap *snapshot
}

// NewDomainTable returns a view of lim's table that copies it at most once per ttl
// (DefaultSnapshotTTL when ttl <= 0).
func NewDomainTable(lim *limiter.Limiter, ttl time.Duration) *DomainTable {
	if ttl <= 0 {
		ttl = DefaultSnapshotTTL
	}
	return &DomainTable{lim: lim, ttl: ttl}
}

// current returns a snapshot no older than the TTL at now.
func (t *DomainTable) current(now time.Time) *snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.snap; s != nil && !now.Before(s.at) && now.Sub(s.at) < t.ttl {
		return s
	}
	t.snap = t.build(now)
	return t.snap
}

func (t *DomainTable) build(now time.Time) *snapshot {
	// Room for the table as it is now plus domains added during the copy, so that
	// appending never copies 10^5 rows again.
	n := t.lim.Stats(now).DomainCount
	s := &snapshot{at: now, orders: map[orderKey]*order{}, rows: make([]row, 0, n+n/16+16)}
	activeFrom := now.Add(-ActiveSpan)
	sum := &s.summary
	t.lim.Range(now, func(st downloader.DomainState) bool {
		s.rows = append(s.rows, rowOf(&st))
		if !st.RebuildLossAt.IsZero() {
			s.lossAt = st.RebuildLossAt
		}
		if st.InFlightCount > 0 || (st.Request24hCount > 0 && !st.LastRequestAt.Before(activeFrom)) {
			sum.ActiveDomainCount++
			if st.MinIntervalMs <= 0 {
				sum.UnboundedDomainCount++
			} else {
				sum.PolitenessSumPerSecond += 1000 / float64(st.MinIntervalMs)
			}
		}
		return true
	})
	sum.SnapshotAt = now.UTC()
	sum.DomainCount = len(s.rows)
	return s
}

// Summary returns the table's numbers (from a snapshot at most one TTL old).
func (t *DomainTable) Summary(now time.Time) DomainSummary { return t.current(now).summary }

// DomainQuery asks for one page of the table.
type DomainQuery struct {
	Sort       string // one of SortKeys(); default SortLastRequest
	Descending bool
	Search     string // a substring of the domain (case-insensitive); empty: all
	Limit      int    // default DefaultPageLimit, at most MaxPageLimit
	Cursor     string // NextCursor of the previous page; empty: the first page
}

// DomainPage is one page of the table.
type DomainPage struct {
	Domains []downloader.DomainState `json:"domains"`
	// NextCursor continues after the page's last row with the same sort and search;
	// null on the last page.
	NextCursor *string `json:"next_cursor"`
	// MatchCount counts the domains that match the search (all of them without one).
	MatchCount  int       `json:"match_count"`
	DomainCount int       `json:"domain_count"`
	SnapshotAt  time.Time `json:"snapshot_at"`
}

// Page returns one page of the table, sorted and filtered as q asks. An unknown sort key
// or a cursor that was not made for this sort is an EINVALID error.
func (t *DomainTable) Page(now time.Time, q DomainQuery) (DomainPage, error) {
	if q.Sort == "" {
		q.Sort = SortLastRequest
	}
	if !slices.Contains(SortKeys(), q.Sort) {
		return DomainPage{}, downloader.Invalidf("sort", "sort must be one of %s", strings.Join(SortKeys(), ", "))
	}
	switch {
	case q.Limit <= 0:
		q.Limit = DefaultPageLimit
	case q.Limit > MaxPageLimit:
		q.Limit = MaxPageLimit
	}
	search := normalizeSearch(q.Search)
	s := t.current(now)
	key := orderKey{q.Sort, q.Descending}
	perm := s.order(key)

	start := 0
	if q.Cursor != "" {
		c, err := decodeCursor(q.Cursor, key)
		if err != nil {
			return DomainPage{}, err
		}
		// The first row strictly after the cursor in this order.
		start = sort32(len(perm), func(i int) bool { return compareRows(&s.rows[perm[i]], &c, key) > 0 })
	}
	page := DomainPage{Domains: make([]downloader.DomainState, 0, min(q.Limit, len(perm))),
		DomainCount: len(s.rows), MatchCount: len(s.rows), SnapshotAt: s.at.UTC()}
	var last *row
	more := false
	for i := start; i < len(perm); i++ {
		r := &s.rows[perm[i]]
		if search != "" && !strings.Contains(r.domain, search) {
			continue
		}
		if len(page.Domains) == q.Limit {
			more = true
			break
		}
		page.Domains = append(page.Domains, r.domainState(s.lossAt))
		last = r
	}
	if more && last != nil {
		c := encodeCursor(last, key)
		page.NextCursor = &c
	}
	if search != "" {
		page.MatchCount = 0
		for i := range s.rows {
			if strings.Contains(s.rows[i].domain, search) {
				page.MatchCount++
			}
		}
	}
	return page, nil
}

// sort32 is sort.Search without the import's int conversions.
func sort32(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if !f(h) {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}

// normalizeSearch lower-cases a search and turns an internationalised name into its ASCII
// form, as the limiter's keys are.
func normalizeSearch(q string) string {
	q = strings.ToLower(strings.TrimSpace(q))
	if q == "" {
		return ""
	}
	if d, err := downloader.CanonicalHost(q); err == nil {
		return d
	}
	return q
}

// order returns the rows' indexes sorted by key, computing it on first use.
func (s *snapshot) order(key orderKey) []int32 {
	s.mu.Lock()
	o := s.orders[key]
	if o == nil {
		o = &order{}
		s.orders[key] = o
	}
	s.mu.Unlock()
	o.once.Do(func() { o.perm = s.sort(key) })
	return o.perm
}

// sort sorts the rows by key. Only the domain order compares strings; every other order
// sorts (value, rank in the domain order) pairs, which is several times faster at 10^5
// rows than comparing rows through their indexes.
func (s *snapshot) sort(key orderKey) []int32 {
	n := len(s.rows)
	if key.sort == SortDomain {
		if key.desc {
			perm := slices.Clone(s.order(orderKey{SortDomain, false}))
			slices.Reverse(perm)
			return perm
		}
		// The first 8 bytes as a number settle most comparisons without reading the
		// strings (which are scattered over the heap).
		type item struct {
			prefix uint64
			index  int32
		}
		items := make([]item, n)
		for i := range s.rows {
			items[i] = item{prefixOf(s.rows[i].domain), int32(i)}
		}
		slices.SortFunc(items, func(a, b item) int {
			if c := cmp.Compare(a.prefix, b.prefix); c != 0 {
				return c
			}
			return strings.Compare(s.rows[a.index].domain, s.rows[b.index].domain)
		})
		perm := make([]int32, n)
		for k, it := range items {
			perm[k] = it.index
		}
		return perm
	}
	byDomain := s.order(orderKey{SortDomain, false})
	type item struct {
		value int64
		rank  int32
		index int32
	}
	items := make([]item, n)
	for rank, i := range byDomain {
		v := sortValue(&s.rows[i], key.sort)
		if key.desc {
			v = -v
		}
		items[rank] = item{v, int32(rank), i}
	}
	slices.SortFunc(items, func(a, b item) int {
		if c := cmp.Compare(a.value, b.value); c != 0 {
			return c
		}
		return cmp.Compare(a.rank, b.rank)
	})
	perm := make([]int32, n)
	for k, it := range items {
		perm[k] = it.index
	}
	return perm
}

// prefixOf packs the first 8 bytes of s big-endian, zero-padded, so that prefixes
// compare as the strings do.
func prefixOf(s string) uint64 {
	var p uint64
	for i := range 8 {
		p <<= 8
		if i < len(s) {
			p |= uint64(s[i])
		}
	}
	return p
}

// sortValue is a row's value for a sort key other than the domain.
func sortValue(r *row, key string) int64 {
	switch key {
	case SortMinInterval:
		return int64(r.intervalMs)
	case SortIntervalSource:
		return int64(r.source)
	case SortLastRequest:
		return r.lastNs
	case SortInFlight:
		return int64(r.inFlight)
	case SortRequests:
		return int64(r.requests)
	case SortState:
		return int64(r.state)
	}
	return 0
}

// compareRows orders two rows by key, then by domain ascending (domains are unique, so the
// order is total and a cursor names one position).
func compareRows(a, b *row, key orderKey) int {
	if key.sort == SortDomain {
		c := strings.Compare(a.domain, b.domain)
		if key.desc {
			c = -c
		}
		return c
	}
	c := cmp.Compare(sortValue(a, key.sort), sortValue(b, key.sort))
	if key.desc {
		c = -c
	}
	if c == 0 {
		c = strings.Compare(a.domain, b.domain)
	}
	return c
}

// A cursor is "sort,desc,value,domain" in URL-safe base64: the sort value and domain of
// the last row shown, so that it stays right when the table changes between pages.
func encodeCursor(r *row, key orderKey) string {
	v := strconv.FormatInt(sortValue(r, key.sort), 10)
	return base64.RawURLEncoding.EncodeToString([]byte(key.sort + "," + strconv.FormatBool(key.desc) + "," + v + "," + r.domain))
}

func decodeCursor(c string, key orderKey) (row, error) {
	bad := downloader.Invalidf("cursor", "cursor is not a cursor of this sort order: start from the first page")
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return row{}, bad
	}
	parts := strings.SplitN(string(b), ",", 4)
	if len(parts) != 4 || parts[0] != key.sort || parts[1] != strconv.FormatBool(key.desc) {
		return row{}, bad
	}
	r := row{domain: parts[3]}
	v := parts[2]
	n, err := strconv.ParseInt(v, 10, 64)
	if key.sort != SortDomain && err != nil {
		return row{}, bad
	}
	switch key.sort {
	case SortMinInterval:
		r.intervalMs = int32(n)
	case SortIntervalSource:
		if n < 0 || n >= int64(len(sources())) {
			return row{}, bad
		}
		r.source = uint8(n)
	case SortLastRequest:
		r.lastNs = n
	case SortInFlight:
		r.inFlight = int32(n)
	case SortRequests:
		r.requests = uint32(n)
	case SortState:
		if n < 0 || n >= int64(len(states())) {
			return row{}, bad
		}
		r.state = uint8(n)
	}
	return r, nil
}

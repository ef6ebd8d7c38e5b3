package observe

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/limiter"
)

// fill admits n domains d00000.test… with intervals of 1–4 s, one in five with the default
// source and one in seven twice, starting two hours after t0 (past the limiter's loss).
// Domain i is admitted at start + i ms.
func fill(t testing.TB, lim *limiter.Limiter, n int) time.Time {
	t.Helper()
	start := t0.Add(2 * time.Hour)
	for i := range n {
		now := start.Add(time.Duration(i) * time.Millisecond)
		d := fmt.Sprintf("d%05d.test", i)
		src := downloader.IntervalSourceLease
		if i%5 == 0 {
			src = downloader.IntervalSourceDefault
		}
		iv := time.Duration(1+i%4) * time.Second
		a, wait := lim.Allow(now, d, iv, src, downloader.EntryRender)
		if wait > 0 {
			t.Fatalf("%s refused", d)
		}
		if i%3 != 0 {
			a.Done() // every third stays in flight
		}
		if i%7 == 0 {
			// over the limit for entry C: state over_limit_c
			lim.Allow(now, d, iv, src, downloader.EntryProbe)
		}
	}
	return start.Add(time.Duration(n) * time.Millisecond)
}

func TestDomainTablePaging(t *testing.T) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	const n = 237
	now := fill(t, lim, n)
	clk.Set(now)
	tab := NewDomainTable(lim, time.Minute)

	for _, key := range SortKeys() {
		for _, desc := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s desc=%v", key, desc), func(t *testing.T) {
				var all []downloader.DomainState
				q := DomainQuery{Sort: key, Descending: desc, Limit: 50}
				pages := 0
				for {
					p, err := tab.Page(now, q)
					if err != nil {
						t.Fatal(err)
					}
					pages++
					if p.DomainCount != n || p.MatchCount != n {
						t.Fatalf("counts %d %d", p.DomainCount, p.MatchCount)
					}
					all = append(all, p.Domains...)
					if p.NextCursor == nil {
						break
					}
					q.Cursor = *p.NextCursor
				}
				if len(all) != n || pages != 5 {
					t.Fatalf("%d rows in %d pages, want %d in 5", len(all), pages, n)
				}
				seen := map[string]bool{}
				for i, st := range all {
					if seen[st.Domain] {
						t.Fatalf("%s twice", st.Domain)
					}
					seen[st.Domain] = true
					if i > 0 && !inOrder(all[i-1], st, key, desc) {
						t.Fatalf("rows %d and %d out of order: %+v %+v", i-1, i, all[i-1], st)
					}
				}
			})
		}
	}
}

// inOrder reports whether a may come before b.
func inOrder(a, b downloader.DomainState, key string, desc bool) bool {
	var c int
	switch key {
	case SortDomain:
		c = strings.Compare(a.Domain, b.Domain)
	case SortMinInterval:
		c = compare(a.MinIntervalMs, b.MinIntervalMs)
	case SortIntervalSource:
		c = strings.Compare(string(a.IntervalSource), string(b.IntervalSource))
	case SortLastRequest:
		c = a.LastRequestAt.Compare(b.LastRequestAt)
	case SortInFlight:
		c = compare(a.InFlightCount, b.InFlightCount)
	case SortRequests:
		c = compare(a.Request24hCount, b.Request24hCount)
	case SortState:
		c = strings.Compare(string(a.State), string(b.State))
	}
	if desc {
		c = -c
	}
	if c == 0 && key != SortDomain {
		return a.Domain < b.Domain
	}
	return c < 0
}

func compare[T int | int64 | uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestDomainTableRowsMatchTheLimiter(t *testing.T) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	now := fill(t, lim, 40)
	tab := NewDomainTable(lim, time.Minute)
	p, err := tab.Page(now, DomainQuery{Sort: SortDomain, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range p.Domains {
		want, ok := lim.Domain(now, got.Domain)
		if !ok {
			t.Fatalf("%s not in the limiter", got.Domain)
		}
		if got.LastOverLimitAt != nil && want.LastOverLimitAt != nil && got.LastOverLimitAt.Equal(*want.LastOverLimitAt) {
			got.LastOverLimitAt = want.LastOverLimitAt
		}
		if got.LastRequestAt.Equal(want.LastRequestAt) {
			got.LastRequestAt = want.LastRequestAt
		}
		if got != want {
			t.Errorf("row %+v, limiter %+v", got, want)
		}
	}
	if p.Domains[0].State != downloader.RateStateOverLimitC || p.Domains[1].State != downloader.RateStateNormal {
		t.Errorf("states %s %s", p.Domains[0].State, p.Domains[1].State)
	}
}

func TestDomainTableSearchAndErrors(t *testing.T) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	now := fill(t, lim, 300)
	tab := NewDomainTable(lim, time.Minute)

	p, err := tab.Page(now, DomainQuery{Search: " D001", Sort: SortDomain, Limit: 40})
	if err != nil {
		t.Fatal(err)
	}
	if p.MatchCount != 100 || len(p.Domains) != 40 || p.NextCursor == nil {
		t.Fatalf("search: %d matches, %d rows", p.MatchCount, len(p.Domains))
	}
	var all []string
	for q := (DomainQuery{Search: "d001", Sort: SortDomain, Limit: 40}); ; {
		p, err := tab.Page(now, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range p.Domains {
			all = append(all, d.Domain)
		}
		if p.NextCursor == nil {
			break
		}
		q.Cursor = *p.NextCursor
	}
	if len(all) != 100 || all[0] != "d00100.test" || all[99] != "d00199.test" || !slices.IsSorted(all) {
		t.Errorf("searched pages: %d rows, %v … %v", len(all), all[0], all[len(all)-1])
	}
	if p, _ := tab.Page(now, DomainQuery{Search: "nothing-like-it"}); p.MatchCount != 0 || len(p.Domains) != 0 || p.NextCursor != nil {
		t.Errorf("no match: %+v", p)
	}

	cur := *p.NextCursor
	bad := []DomainQuery{
		{Sort: "status_code"},
		{Sort: SortDomain, Cursor: "!!"},
		{Sort: SortRequests, Cursor: cur},                 // made for sort=domain
		{Sort: SortDomain, Descending: true, Cursor: cur}, // made for ascending
		{Sort: SortState, Cursor: encodeCursor(&row{state: 200}, orderKey{SortDomain, false})}, // wrong sort
	}
	for _, q := range bad {
		if _, err := tab.Page(now, q); downloader.ErrorCode(err) != downloader.EINVALID {
			t.Errorf("%+v: %v, want EINVALID", q, err)
		}
	}
	if p, err := tab.Page(now, DomainQuery{Limit: 10_000}); err != nil || len(p.Domains) != 300 {
		t.Errorf("limit is capped at %d: %d rows, %v", MaxPageLimit, len(p.Domains), err)
	}
	if p, err := tab.Page(now, DomainQuery{}); err != nil || len(p.Domains) != DefaultPageLimit ||
		p.Domains[0].Domain != "d00000.test" {
		// default sort: last_request_at ascending, oldest first
		t.Errorf("default page: %d rows from %v, %v", len(p.Domains), p.Domains[0].Domain, err)
	}
}

// TestDomainTableCursorSurvivesChanges pages on while the table changes under it: rows
// stay in order and none already shown comes back.
func TestDomainTableCursorSurvivesChanges(t *testing.T) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	now := fill(t, lim, 100)
	tab := NewDomainTable(lim, time.Nanosecond) // a new copy every call
	p, err := tab.Page(now, DomainQuery{Sort: SortDomain, Limit: 30})
	if err != nil {
		t.Fatal(err)
	}
	// New domains before and after the cursor.
	for _, d := range []string{"a.test", "d00015x.test", "d00050x.test", "z.test"} {
		lim.Allow(now, d, time.Second, downloader.IntervalSourceLease, downloader.EntryRender)
	}
	now = now.Add(time.Millisecond)
	p2, err := tab.Page(now, DomainQuery{Sort: SortDomain, Limit: 30, Cursor: *p.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if p2.DomainCount != 104 || p2.Domains[0].Domain != "d00030.test" {
		t.Errorf("after the change: %d domains, first %s", p2.DomainCount, p2.Domains[0].Domain)
	}
	for _, d := range p2.Domains {
		if d.Domain == "d00015x.test" {
			t.Errorf("a domain before the cursor showed up after it")
		}
	}
}

func TestDomainTableSummary(t *testing.T) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	start := t0.Add(2 * time.Hour)
	admit := func(at time.Time, d string, iv time.Duration, inFlight bool) {
		a, wait := lim.Allow(at, d, iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
		if wait > 0 {
			t.Fatalf("%s refused", d)
		}
		if !inFlight {
			a.Done()
		}
	}
	admit(start, "old.test", time.Second, false)                           // 10 min before now: inactive
	admit(start, "slow.test", 10*time.Minute, true)                        // old but in flight: active
	admit(start.Add(8*time.Minute), "a.test", 500*time.Millisecond, false) // 2/s
	admit(start.Add(9*time.Minute), "b.test", 2*time.Second, false)        // 0.5/s
	admit(start.Add(9*time.Minute), "free.test", 0, false)                 // unbounded
	now := start.Add(10 * time.Minute)
	s := NewDomainTable(lim, 0).Summary(now)
	if s.DomainCount != 5 || s.ActiveDomainCount != 4 || s.UnboundedDomainCount != 1 {
		t.Errorf("summary %+v", s)
	}
	// The sum runs in map order: compare within rounding, not bit for bit.
	if want := 2 + 0.5 + 1.0/600; math.Abs(s.PolitenessSumPerSecond-want) > 1e-9 {
		t.Errorf("politeness %v, want %v", s.PolitenessSumPerSecond, want)
	}
}

func TestDomainTableTTL(t *testing.T) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	now := fill(t, lim, 10)
	tab := NewDomainTable(lim, 2*time.Second)
	if s := tab.Summary(now); s.DomainCount != 10 {
		t.Fatal(s)
	}
	lim.Allow(now, "new.test", time.Second, downloader.IntervalSourceLease, downloader.EntryRender)
	if s := tab.Summary(now.Add(time.Second)); s.DomainCount != 10 {
		t.Errorf("within the TTL the copy is reused: %d", s.DomainCount)
	}
	if s := tab.Summary(now.Add(2 * time.Second)); s.DomainCount != 11 {
		t.Errorf("after the TTL: %d, want 11", s.DomainCount)
	}
}

// BenchmarkDomainTable measures the console's per-domain table at 10^5 domains: a fresh
// copy and sort (the first page after the TTL) and a further page of the same copy.
func BenchmarkDomainTable(b *testing.B) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	now := fill(b, lim, 100_000)
	b.Run("copy+sort+page", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			tab := NewDomainTable(lim, time.Hour)
			if _, err := tab.Page(now, DomainQuery{Sort: SortRequests, Descending: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	tab := NewDomainTable(lim, time.Hour)
	p, _ := tab.Page(now, DomainQuery{Sort: SortDomain, Limit: 50})
	b.Run("next page", func(b *testing.B) {
		for b.Loop() {
			if _, err := tab.Page(now, DomainQuery{Sort: SortDomain, Limit: 50, Cursor: *p.NextCursor}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("search page", func(b *testing.B) {
		for b.Loop() {
			if _, err := tab.Page(now, DomainQuery{Sort: SortDomain, Limit: 50, Search: "d0123"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDomainTableNoRequestKnown: a domain refused by the conservative rebuild before any
// request shows no last_request_at and the loss moment as rebuild_loss_at, as the limiter
// does, and sorts before every domain with a request (never is older than any time).
func TestDomainTableNoRequestKnown(t *testing.T) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk) // lost at t0
	now := t0.Add(time.Minute)
	a, wait := lim.Allow(now, "seen.test", time.Second, downloader.IntervalSourceLease, downloader.EntryLease)
	if wait > 0 {
		t.Fatal("seen.test refused")
	}
	a.Done()
	if _, wait := lim.Allow(now, "held.test", time.Hour, downloader.IntervalSourceLease, downloader.EntryProbe); wait == 0 {
		t.Fatal("held.test admitted within the rebuild")
	}
	tab := NewDomainTable(lim, time.Minute)
	p, err := tab.Page(now, DomainQuery{Sort: SortLastRequest})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Domains) != 2 || p.Domains[0].Domain != "held.test" {
		t.Fatalf("rows %+v, want held.test first", p.Domains)
	}
	for _, got := range p.Domains {
		want, _ := lim.Domain(now, got.Domain)
		if !got.LastRequestAt.Equal(want.LastRequestAt) || !got.RebuildLossAt.Equal(want.RebuildLossAt) {
			t.Errorf("%s: row last_request_at %v rebuild_loss_at %v, limiter %v %v", got.Domain,
				got.LastRequestAt, got.RebuildLossAt, want.LastRequestAt, want.RebuildLossAt)
		}
	}
	if h := p.Domains[0]; !h.LastRequestAt.IsZero() || !h.RebuildLossAt.Equal(t0) {
		t.Errorf("held.test: %+v, want no last_request_at and rebuild_loss_at t0", h)
	}
	// Paging past the domain with no request works with its cursor.
	p1, err := tab.Page(now, DomainQuery{Sort: SortLastRequest, Limit: 1})
	if err != nil || p1.NextCursor == nil {
		t.Fatalf("first page %+v %v", p1, err)
	}
	p2, err := tab.Page(now, DomainQuery{Sort: SortLastRequest, Limit: 1, Cursor: *p1.NextCursor})
	if err != nil || len(p2.Domains) != 1 || p2.Domains[0].Domain != "seen.test" {
		t.Fatalf("second page %+v %v", p2, err)
	}
}

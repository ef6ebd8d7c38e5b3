package limiter

import (
	"encoding/json"
	"sort"
	"testing"
	"time"

	"downloader"
)

// TestWindow checks the hourly 24 h counter on its own.
func TestWindow(t *testing.T) {
	type op struct {
		add     bool
		hour    int32
		n       uint32
		wantSum uint64 // for a sum at hour
	}
	tests := []struct {
		name string
		ops  []op
	}{
		{"empty", []op{{hour: 0}, {hour: 1000}}},
		{"one hour", []op{{true, 5, 3, 0}, {hour: 5, wantSum: 3}, {hour: 28, wantSum: 3}, {hour: 29, wantSum: 0}}},
		{"accumulates", []op{{true, 0, 1, 0}, {true, 0, 2, 0}, {true, 3, 4, 0}, {hour: 3, wantSum: 7}, {hour: 23, wantSum: 7}, {hour: 24, wantSum: 4}, {hour: 26, wantSum: 4}, {hour: 27, wantSum: 0}}},
		{"every hour for 30 h", func() []op {
			var ops []op
			for h := int32(0); h < 30; h++ {
				ops = append(ops, op{add: true, hour: h, n: 1})
				want := uint64(min(h+1, windowHours))
				ops = append(ops, op{hour: h, wantSum: want})
			}
			return ops
		}()},
		{"gap of a day clears", []op{{true, 1, 5, 0}, {true, 30, 1, 0}, {hour: 30, wantSum: 1}}},
		{"gap just under a day keeps", []op{{true, 1, 5, 0}, {true, 24, 1, 0}, {hour: 24, wantSum: 6}, {hour: 25, wantSum: 1}}},
		{"late event inside the window", []op{{true, 10, 1, 0}, {true, 8, 2, 0}, {hour: 10, wantSum: 3}, {hour: 31, wantSum: 3}, {hour: 32, wantSum: 1}}},
		{"late event outside the window is dropped", []op{{true, 40, 1, 0}, {true, 16, 9, 0}, {hour: 40, wantSum: 1}}},
		{"slot reuse after a day", []op{{true, 2, 7, 0}, {true, 26, 1, 0}, {hour: 26, wantSum: 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWindow()
			for i, o := range tc.ops {
				if o.add {
					w.add(o.hour, o.n)
					continue
				}
				if got := w.sum(o.hour); got != o.wantSum {
					t.Fatalf("op %d: sum(%d) = %d, want %d", i, o.hour, got, o.wantSum)
				}
				if w.isEmpty(o.hour) != (o.wantSum == 0) {
					t.Fatalf("op %d: isEmpty(%d) = %v", i, o.hour, w.isEmpty(o.hour))
				}
			}
		})
	}
}

// TestRequestCountRollsOver: one request an hour for 25 hours, then silence: the 24 h
// counts of the domain and of the service roll over hour by hour.
func TestRequestCountRollsOver(t *testing.T) {
	l, clk := newFake()
	const d = "example.com"
	clk.Set(at(past))
	start := clk.Now()
	for h := range 25 {
		a := mustAllow(t, l, clk.Now(), d, time.Second)
		a.Done()
		want := uint64(min(h+1, 24))
		if got := state(t, l, clk.Now(), d).Request24hCount; got != want {
			t.Fatalf("hour %d: request_24h_count = %d, want %d", h, got, want)
		}
		if got := l.Stats(clk.Now()).Request24hCount; got != want {
			t.Fatalf("hour %d: Stats request_24h_count = %d, want %d", h, got, want)
		}
		clk.Advance(time.Hour)
	}
	// At start+25h the requests of start+2h .. start+24h remain (23); each further hour
	// drops one.
	for h := 25; h <= 49; h++ {
		now := start.Add(time.Duration(h) * time.Hour)
		want := uint64(max(0, 48-h))
		if got := state(t, l, now, d).Request24hCount; got != want {
			t.Fatalf("+%dh: request_24h_count = %d, want %d", h, got, want)
		}
		if got := l.Stats(now).Request24hCount; got != want {
			t.Fatalf("+%dh: Stats request_24h_count = %d, want %d", h, got, want)
		}
	}
}

// TestTriggerCounts: over-limit events are counted per entry over 24 h, service-wide, and
// each domain remembers its latest one.
func TestTriggerCounts(t *testing.T) {
	l, _ := newFake()
	s := at(past)
	const I = time.Second
	for _, d := range []string{"a.example", "b.example", "c.example"} {
		a := mustAllow(t, l, s, d, I)
		a.Done()
	}
	// A: two delayed reservations and one past its deadline.
	r1, _, _ := l.Reserve(s, "a.example", I, srcLease, entryA, time.Time{})
	r2, _, _ := l.Reserve(s, "a.example", I, srcLease, entryA, time.Time{})
	if _, _, ok := l.Reserve(s, "a.example", I, srcLease, entryA, s.Add(time.Second)); ok {
		t.Fatal("a reservation past its deadline was made")
	}
	// B: three refusals; C: one.
	for range 3 {
		mustRefuse(t, l, s, "b.example", I, I)
	}
	if a, _ := l.Allow(s, "c.example", I, srcDefault, entryC); a.Admitted() {
		t.Fatal("C admitted")
	}

	st := l.Stats(s)
	want := map[downloader.Entry]uint64{entryA: 3, entryB: 3, entryC: 1}
	for e, n := range want {
		if st.Trigger24hCount[e] != n {
			t.Fatalf("trigger_24h_count[%s] = %d, want %d (all: %v)", e, st.Trigger24hCount[e], n, st.Trigger24hCount)
		}
	}
	if st.DomainCount != 3 || st.Request24hCount != 5 || st.InFlightCount != 2 {
		t.Fatalf("Stats = %+v", st)
	}
	for d, e := range map[string]downloader.Entry{"a.example": entryA, "b.example": entryB, "c.example": entryC} {
		ds := state(t, l, s, d)
		if ds.LastOverLimitEntry != e || ds.LastOverLimitAt == nil || !ds.LastOverLimitAt.Equal(s) {
			t.Fatalf("%s: last over-limit = (%q, %v), want (%q, %v)", d, ds.LastOverLimitEntry, ds.LastOverLimitAt, e, s)
		}
	}
	r1.Done()
	r2.Done()

	// 24 h later the triggers have rolled out.
	st = l.Stats(s.Add(24 * time.Hour))
	for _, e := range downloader.Entries {
		if st.Trigger24hCount[e] != 0 {
			t.Fatalf("after 24 h: trigger_24h_count[%s] = %d", e, st.Trigger24hCount[e])
		}
	}
	if st.Request24hCount != 0 {
		t.Fatalf("after 24 h: request_24h_count = %d", st.Request24hCount)
	}
}

// TestOverLimitState: a domain shows over_limit_<entry> for five minutes after its latest
// over-limit event, then normal again.
func TestOverLimitState(t *testing.T) {
	s := at(past)
	const I = time.Second
	tests := []struct {
		entry downloader.Entry
		want  downloader.RateState
	}{
		{entryA, downloader.RateStateOverLimitA},
		{entryB, downloader.RateStateOverLimitB},
		{entryC, downloader.RateStateOverLimitC},
	}
	for _, tc := range tests {
		t.Run(string(tc.entry), func(t *testing.T) {
			l, _ := newFake()
			const d = "example.com"
			a := mustAllow(t, l, s, d, I)
			a.Done()
			if st := state(t, l, s, d); st.State != downloader.RateStateNormal || st.LastOverLimitAt != nil || st.LastOverLimitEntry != "" {
				t.Fatalf("before any refusal: %+v", st)
			}
			refusedAt := s.Add(100 * time.Millisecond)
			if tc.entry == entryA {
				r, _, _ := l.Reserve(refusedAt, d, I, srcLease, entryA, time.Time{})
				r.Cancel()
			} else if b, _ := l.Allow(refusedAt, d, I, srcRequest, tc.entry); b.Admitted() {
				t.Fatal("admitted")
			}
			for _, c := range []struct {
				after time.Duration
				want  downloader.RateState
			}{
				{0, tc.want},
				{overLimitStateSpan - 1, tc.want},
				{overLimitStateSpan, downloader.RateStateNormal},
				{time.Hour, downloader.RateStateNormal},
			} {
				st := state(t, l, refusedAt.Add(c.after), d)
				if st.State != c.want {
					t.Fatalf("+%v: state = %q, want %q", c.after, st.State, c.want)
				}
				if st.LastOverLimitEntry != tc.entry || st.LastOverLimitAt == nil || !st.LastOverLimitAt.Equal(refusedAt) {
					t.Fatalf("+%v: last over-limit = (%q, %v)", c.after, st.LastOverLimitEntry, st.LastOverLimitAt)
				}
			}
		})
	}
}

// TestRange visits every domain once and stops when asked.
func TestRange(t *testing.T) {
	l, _ := newFake()
	s := at(past)
	want := []string{"a.example", "b.example", "c.example", "d.example", "e.example"}
	for _, d := range want {
		a := mustAllow(t, l, s, d, time.Second)
		a.Done()
	}
	var got []string
	l.Range(s, func(st downloader.DomainState) bool {
		got = append(got, st.Domain)
		if st.Request24hCount != 1 || st.MinIntervalMs != 1000 || st.IntervalSource != srcRequest {
			t.Errorf("%s: %+v", st.Domain, st)
		}
		return true
	})
	sort.Strings(got)
	if len(got) != len(want) {
		t.Fatalf("Range visited %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Range visited %v, want %v", got, want)
		}
	}
	n := 0
	l.Range(s, func(downloader.DomainState) bool { n++; return n < 2 })
	if n != 2 {
		t.Fatalf("Range went on after false: %d calls", n)
	}
	if _, ok := l.Domain(s, "unknown.example"); ok {
		t.Fatal("Domain of an unknown domain: ok")
	}
}

// TestDomainStateJSON pins the wire names of the runtime API (SPEC §7).
func TestDomainStateJSON(t *testing.T) {
	l, _ := newFake()
	s := at(past)
	a := mustAllow(t, l, s, "example.com", 1500*time.Millisecond)
	mustRefuse(t, l, s, "example.com", time.Second, time.Second)
	b, err := json.Marshal(state(t, l, s, "example.com"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"domain":                "example.com",
		"min_interval_ms":       1500.0,
		"interval_source":       "request",
		"last_request_at":       s.UTC().Format(time.RFC3339Nano),
		"in_flight_count":       1.0,
		"request_24h_count":     1.0,
		"state":                 "over_limit_b",
		"last_over_limit_entry": "b",
		"last_over_limit_at":    s.UTC().Format(time.RFC3339Nano),
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (all: %s)", k, m[k], v, b)
		}
	}
	if len(m) != len(want) {
		t.Errorf("fields: %s", b)
	}
	a.Done()

	sb, err := json.Marshal(l.Stats(s))
	if err != nil {
		t.Fatal(err)
	}
	var sm map[string]any
	if err := json.Unmarshal(sb, &sm); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"domain_count", "in_flight_count", "request_24h_count", "trigger_24h_count"} {
		if _, ok := sm[k]; !ok {
			t.Errorf("Stats JSON lacks %s: %s", k, sb)
		}
	}
}

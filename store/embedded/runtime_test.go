package embedded

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"downloader"
)

// reopen closes s and opens its directory again, as a restart does.
func reopen(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

// TestRuntimeStarts walks one data dir through every kind of start: fresh, crashed (the
// last heartbeat), clean stop (the saved entries exactly), and crashed again after a
// restore (the snapshot is used once).
func TestRuntimeStarts(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)

	start, err := s.StartRuntime(ctx, t1)
	if err != nil || start.Kind != RuntimeFresh {
		t.Fatalf("first start: %+v %v, want fresh", start, err)
	}
	if err := s.Heartbeat(ctx, t1.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, s, dir) // as after kill -9: no clean stop
	start, err = s.StartRuntime(ctx, t1.Add(time.Minute))
	if err != nil || start.Kind != RuntimeCrashed || !start.LastHeartbeatAt.Equal(t1.Add(3*time.Second)) {
		t.Fatalf("start after a crash: %+v %v, want crashed with the last heartbeat", start, err)
	}

	snap := downloader.RuntimeSnapshot{
		SavedAt: t1.Add(2 * time.Minute),
		LossAt:  t1.Add(time.Minute),
		Entries: []downloader.SavedDomain{
			{Domain: "a.example", LastRequestAt: t1.Add(100 * time.Second), WireAt: t1.Add(101 * time.Second), MinIntervalMs: 1500,
				IntervalSource: downloader.IntervalSourceLease},
			{Domain: "held.example", LastRequestAt: t1.Add(time.Minute)},
			{Domain: "[::1]", LastRequestAt: t1.Add(110 * time.Second), WireAt: t1.Add(110 * time.Second), MinIntervalMs: 0,
				IntervalSource: downloader.IntervalSourceDefault, InFlightCount: 2},
		},
	}
	if err := s.SaveRuntime(ctx, snap); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, dir)
	start, err = s.StartRuntime(ctx, t1.Add(3*time.Minute))
	if err != nil || start.Kind != RuntimeCleanStop {
		t.Fatalf("start after a clean stop: %+v %v", start, err)
	}
	got := map[string]downloader.SavedDomain{}
	for _, e := range start.Snapshot.Entries {
		got[e.Domain] = e
	}
	for _, want := range snap.Entries {
		if !reflect.DeepEqual(got[want.Domain], want) {
			t.Errorf("restored %+v, want %+v", got[want.Domain], want)
		}
	}
	if len(got) != len(snap.Entries) || !start.Snapshot.SavedAt.Equal(snap.SavedAt) || !start.Snapshot.LossAt.Equal(snap.LossAt) {
		t.Errorf("restored %+v, want %+v", start.Snapshot, snap)
	}

	// The snapshot was taken away by that start: a crash now is a crash, from the
	// heartbeat that start wrote.
	s = reopen(t, s, dir)
	start, err = s.StartRuntime(ctx, t1.Add(4*time.Minute))
	if err != nil || start.Kind != RuntimeCrashed || !start.LastHeartbeatAt.Equal(t1.Add(3*time.Minute)) {
		t.Fatalf("start after a crash following a restore: %+v %v", start, err)
	}
	if n := len(start.Snapshot.Entries); n != 0 {
		t.Errorf("%d entries after a crash", n)
	}
}

// TestRuntimeUnknownBeforeHeartbeats: a data dir with data but no heartbeat (written by a
// build without one) is not taken for a fresh one.
func TestRuntimeUnknownBeforeHeartbeats(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.SaveSettings(t.Context(), downloader.Settings{MaxConcurrentCount: 3}); err != nil {
		t.Fatal(err)
	}
	start, err := s.StartRuntime(t.Context(), time.Now())
	if err != nil || start.Kind != RuntimeUnknown {
		t.Fatalf("%+v %v, want unknown", start, err)
	}
}

// TestRuntimeSaveInterrupted: entries without the clean-stop record (a stop that died
// while saving) are not trusted; the heartbeat decides.
func TestRuntimeSaveInterrupted(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	if _, err := s.StartRuntime(ctx, t1); err != nil {
		t.Fatal(err)
	}
	e := downloader.SavedDomain{Domain: "a.example", LastRequestAt: t1, IntervalSource: downloader.IntervalSourceLease}
	if err := s.db.Set([]byte(domainRuntimePrefix+"a.example"), encodeRuntimeEntry(e), nil); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, dir)
	start, err := s.StartRuntime(ctx, t1.Add(time.Minute))
	if err != nil || start.Kind != RuntimeCrashed || !start.LastHeartbeatAt.Equal(t1) || len(start.Snapshot.Entries) != 0 {
		t.Fatalf("%+v %v, want crashed from the heartbeat at %v", start, err, t1)
	}
	// And the stray entry is gone.
	if _, ok, _ := s.get([]byte(domainRuntimePrefix + "a.example")); ok {
		t.Error("a stray saved entry survived the start")
	}
}

// TestRuntimeEntryCodec checks the entry encoding both ways, including the unknowns.
func TestRuntimeEntryCodec(t *testing.T) {
	tests := []downloader.SavedDomain{
		{Domain: "a.example", LastRequestAt: time.Unix(0, 1_700_000_000_123_456_789).UTC(), WireAt: time.Unix(0, 1_700_000_000_000_000_001).UTC(),
			MinIntervalMs: 3_600_000, IntervalSource: downloader.IntervalSourceRequest, InFlightCount: 1},
		{Domain: "b.example", LastRequestAt: time.Unix(0, 5).UTC()},
		{Domain: "c.example", LastRequestAt: time.Unix(0, 1_700_000_000_123_456_789).UTC(), MinIntervalMs: 1000,
			IntervalSource: downloader.IntervalSourceLease, HoldUntil: time.Unix(0, 1_700_000_003_600_000_000).UTC()},
	}
	for _, e := range tests {
		got, err := decodeRuntimeEntry(e.Domain, encodeRuntimeEntry(e))
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Errorf("round trip of %+v: %+v %v", e, got, err)
		}
	}
	// A version 1 entry (no hold_until_at), as an older process saved it, is still read.
	v1 := append([]byte{runtimeEntryVersion1}, make([]byte, runtimeEntryFixed1-1)...)
	v1[17+3] = 7 // min_interval_ms 7
	v1 = append(v1, "request"...)
	if got, err := decodeRuntimeEntry("d.example", v1); err != nil || got.MinIntervalMs != 7 ||
		got.IntervalSource != downloader.IntervalSourceRequest || !got.HoldUntil.IsZero() {
		t.Errorf("version 1 entry: %+v %v", got, err)
	}
	for _, bad := range [][]byte{nil, {runtimeEntryVersion}, {runtimeEntryVersion1}, append([]byte{9}, make([]byte, runtimeEntryFixed)...)} {
		if _, err := decodeRuntimeEntry("x", bad); err == nil {
			t.Errorf("decoded %v", bad)
		}
	}
}

// BenchmarkHeartbeat measures one heartbeat: a small synchronous commit, once a second.
func BenchmarkHeartbeat(b *testing.B) {
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	for b.Loop() {
		if err := s.Heartbeat(b.Context(), now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSaveAndStartRuntime measures a clean stop's save of 10^5 entries and the next
// start's read.
func BenchmarkSaveAndStartRuntime(b *testing.B) {
	const n = 100_000
	t1 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	snap := downloader.RuntimeSnapshot{SavedAt: t1, Entries: make([]downloader.SavedDomain, n)}
	for i := range snap.Entries {
		snap.Entries[i] = downloader.SavedDomain{Domain: fmt.Sprintf("d%06d.example.com", i), LastRequestAt: t1, WireAt: t1,
			MinIntervalMs: 1000, IntervalSource: downloader.IntervalSourceLease}
	}
	for b.Loop() {
		s, err := Open(b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.SaveRuntime(b.Context(), snap); err != nil {
			b.Fatal(err)
		}
		start, err := s.StartRuntime(b.Context(), t1)
		if err != nil || len(start.Snapshot.Entries) != n {
			b.Fatalf("%v %d", err, len(start.Snapshot.Entries))
		}
		s.Close()
	}
}

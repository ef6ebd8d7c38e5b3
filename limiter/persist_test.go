package limiter

import (
	"downloader"
	"downloader/clock/clocktest"
	"encoding/json"
	"testing"
	"time"
)

// restarted returns a limiter of a new process whose clock starts at start: another epoch
// and another monotonic base than the saving one, as after a real restart.
func restarted(start time.Time) (*Limiter, *clocktest.Fake) {
	clk := clocktest.NewFake(start)
	return New(clk), clk
}

// TestSaveRestoreCleanStop: what a clean stop saves is restored exactly; entries that can
// no longer refuse are not saved; a domain with no entry waits for nothing.
func TestSaveRestoreCleanStop(t *testing.T) {
	l, clk := newFake()
	stop := at(past + 10*time.Minute)
	const I = 1500 * time.Millisecond

	clk.Set(stop.Add(-2 * time.Hour))
	done(mustAllow(t, l, clk.Now(), "gone.example", I)) // its interval passed long ago
	clk.Set(stop.Add(-10 * time.Minute))
	flying := mustAllow(t, l, clk.Now(), "flight.example", time.Second) // still in flight at the stop
	clk.Set(stop.Add(-2 * time.Second))
	early := mustAllow(t, l, clk.Now(), "early.example", I)
	if d := early.Wire(clk.Now().Add(100 * time.Millisecond)); d != 0 {
		t.Fatalf("Wire waited %v", d)
	}
	early.Done()
	clk.Set(stop.Add(-100 * time.Millisecond))
	late, _, ok := l.Reserve(clk.Now(), "late.example", I, srcLease, entryA, time.Time{})
	if !ok {
		t.Fatal("Reserve refused")
	}
	late.Done()

	snap := l.Save(stop)
	flying.Done()
	if !snap.LossAt.IsZero() {
		t.Errorf("LossAt = %v, want none: the loss at t0 can refuse nothing any more", snap.LossAt)
	}
	saved := map[string]downloader.SavedDomain{}
	for _, e := range snap.Entries {
		saved[e.Domain] = e
	}
	if _, ok := saved["gone.example"]; ok || len(saved) != 3 {
		t.Fatalf("saved %v, want early, late and flight.example", saved)
	}
	if e := saved["late.example"]; e.MinIntervalMs != 1500 || e.IntervalSource != srcLease || !e.LastRequestAt.Equal(stop.Add(-100*time.Millisecond)) {
		t.Errorf("late.example saved as %+v", e)
	}
	if _, _, err := roundTripJSON(snap); err != nil {
		t.Fatal(err)
	}

	// The next process starts half a second after the stop, on another clock base.
	l2, clk2 := restarted(stop.Add(500 * time.Millisecond))
	l2.Restore(clk2.Now(), snap)
	now := clk2.Now()
	// Hit 1.9 s (wire) before the stop with a 1.5 s interval: goes at once.
	done(mustAllow(t, l2, now, "early.example", I))
	// Reserved 0.1 s before the stop: waits the rest of its interval, 0.9 s.
	mustRefuse(t, l2, now, "late.example", I, 900*time.Millisecond)
	// In flight at the stop: counts as requested at the stop.
	mustRefuse(t, l2, now, "flight.example", time.Second, 500*time.Millisecond)
	// Unknown domains, and the one not saved, wait for nothing.
	done(mustAllow(t, l2, now, "new.example", time.Hour))
	done(mustAllow(t, l2, now, "gone.example", I))

	st := state(t, l2, now, "late.example")
	if !st.LastRequestAt.Equal(stop.Add(-100*time.Millisecond)) || st.MinIntervalMs != 1500 || st.IntervalSource != srcLease ||
		!st.RebuildLossAt.IsZero() || st.InFlightCount != 0 {
		t.Errorf("late.example after the restore: %+v", st)
	}
	if iv, src, ok := l2.IntervalOf("late.example"); !ok || iv != I || src != srcLease {
		t.Errorf("IntervalOf = %v %v %v", iv, src, ok)
	}
	if _, ok := l2.LossAt(); ok {
		t.Error("LossAt after a clean restore: want none")
	}

	// Wire spaces the next request from the restored wire moment too.
	clk2.Set(stop.Add(2 * time.Second))
	a := mustAllow(t, l2, clk2.Now(), "late.example", I) // 2.1 s after its reservation
	if d := a.Wire(clk2.Now()); d != 0 {
		t.Fatalf("Wire waited %v after a restored entry", d)
	}
	a.Done()
}

// roundTripJSON checks that a downloader.RuntimeSnapshot survives the encoding a store
// may give it.
func roundTripJSON(s downloader.RuntimeSnapshot) (downloader.RuntimeSnapshot, []byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return downloader.RuntimeSnapshot{}, nil, err
	}
	var back downloader.RuntimeSnapshot
	err = json.Unmarshal(b, &back)
	return back, b, err
}

// TestRestoreKeepsAnEarlierLoss: a table restored after a crash and stopped cleanly within
// the largest interval keeps the crash's loss moment: a domain the crashed process may
// have requested still waits from it.
func TestRestoreKeepsAnEarlierLoss(t *testing.T) {
	l, _ := newFake() // lost at t0
	done(mustAllow(t, l, at(time.Minute), "seen.example", time.Second))
	mustRefuse(t, l, at(2*time.Minute), "held.example", time.Hour, 58*time.Minute) // an entry from the loss
	snap := l.Save(at(10 * time.Minute))
	if !snap.LossAt.Equal(t0) {
		t.Fatalf("LossAt = %v, want the loss at t0", snap.LossAt)
	}
	l2, clk2 := restarted(at(11 * time.Minute))
	l2.Restore(clk2.Now(), snap)
	now := clk2.Now()
	mustRefuse(t, l2, now, "never.example", time.Hour, 49*time.Minute)
	done(mustAllow(t, l2, now, "never5.example", 5*time.Minute))
	mustRefuse(t, l2, now, "held.example", time.Hour, 49*time.Minute)
	st := state(t, l2, now, "held.example")
	if !st.LastRequestAt.IsZero() || !st.RebuildLossAt.Equal(t0) {
		t.Errorf("held.example: last_request_at %v, rebuild_loss_at %v; want none and t0", st.LastRequestAt, st.RebuildLossAt)
	}
	if st := state(t, l2, now, "seen.example"); !st.LastRequestAt.Equal(at(time.Minute)) || !st.RebuildLossAt.IsZero() {
		t.Errorf("seen.example: %+v", st)
	}
}

// TestRestoreClockSetBack: a wall clock set back between the save and the restore counts
// as no time passed, never as more.
func TestRestoreClockSetBack(t *testing.T) {
	l, _ := newFake()
	stop := at(past)
	done(mustAllow(t, l, stop.Add(-100*time.Millisecond), "d.example", 1500*time.Millisecond))
	snap := l.Save(stop)
	l2, clk2 := restarted(stop.Add(-time.Hour))
	l2.Restore(clk2.Now(), snap)
	mustRefuse(t, l2, clk2.Now(), "d.example", 1500*time.Millisecond, 1400*time.Millisecond)
}

// TestRestoreAfterCrash: a crash counts as a loss at the last heartbeat plus two periods,
// never later than the new start.
func TestRestoreAfterCrash(t *testing.T) {
	hb := at(past)
	tests := []struct {
		name     string
		start    time.Time
		interval time.Duration
		wantWait time.Duration
	}{
		{"interval passed since the last sign of life", hb.Add(10 * time.Second), 5 * time.Second, 0},
		{"interval not passed", hb.Add(10 * time.Second), time.Minute, 52 * time.Second},
		{"restart within the heartbeat margin", hb.Add(time.Second), 5 * time.Second, 5 * time.Second},
		{"heartbeat ahead of the clock", hb.Add(-time.Hour), 5 * time.Second, 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, clk := restarted(tc.start)
			l.RestoreAfterCrash(clk.Now(), hb, time.Second)
			if tc.wantWait == 0 {
				done(mustAllow(t, l, clk.Now(), "d.example", tc.interval))
			} else {
				mustRefuse(t, l, clk.Now(), "d.example", tc.interval, tc.wantWait)
				st := state(t, l, clk.Now(), "d.example")
				if !st.LastRequestAt.IsZero() || st.RebuildLossAt.IsZero() {
					t.Errorf("after a refusal by the rebuild: %+v", st)
				}
			}
		})
	}
}

// TestFreshTableWaitsForNothing: a data dir that never served has lost nothing.
func TestFreshTableWaitsForNothing(t *testing.T) {
	l, clk := newFake()
	l.SetLoss(time.Time{})
	done(mustAllow(t, l, clk.Now(), "first.example", 5*time.Second))
	mustRefuse(t, l, clk.Now(), "first.example", 5*time.Second, 5*time.Second)
	if _, ok := l.LossAt(); ok {
		t.Error("LossAt: want none")
	}
	st := state(t, l, clk.Now(), "first.example")
	if !st.LastRequestAt.Equal(t0) || !st.RebuildLossAt.IsZero() {
		t.Errorf("%+v", st)
	}
	// Snapshots of such a table hold no loss either.
	if s := l.Save(clk.Now()); !s.LossAt.IsZero() || len(s.Entries) != 1 {
		t.Errorf("Save: %+v", s)
	}
}

// TestLastRequestAtIsNeverInvented: a request given back after a loss leaves no
// last_request_at behind (the loss moment is shown as rebuild_loss_at), and a request
// known from before a loss keeps its own moment.
func TestLastRequestAtIsNeverInvented(t *testing.T) {
	l, _ := newFake() // lost at t0
	a := mustAllow(t, l, at(time.Second), "cancelled.example", 500*time.Millisecond)
	a.Cancel()
	st := state(t, l, at(2*time.Second), "cancelled.example")
	if !st.LastRequestAt.IsZero() || !st.RebuildLossAt.Equal(t0) {
		t.Fatalf("after a cancel: last_request_at %v, rebuild_loss_at %v; want none and t0", st.LastRequestAt, st.RebuildLossAt)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["last_request_at"]; ok || m["rebuild_loss_at"] != t0.Format(time.RFC3339Nano) {
		t.Errorf("JSON %s: want no last_request_at and rebuild_loss_at %s", b, t0.Format(time.RFC3339Nano))
	}
	// Past the largest interval the loss refuses nothing and is not shown any more.
	if st := state(t, l, at(past), "cancelled.example"); !st.RebuildLossAt.IsZero() {
		t.Errorf("rebuild_loss_at %v shown past the largest interval", st.RebuildLossAt)
	}

	// A request on the wire, then a loss while it is in flight.
	wired := mustAllow(t, l, at(past), "wired.example", time.Second)
	if d := wired.Wire(at(past + 100*time.Millisecond)); d != 0 {
		t.Fatalf("Wire waited %v", d)
	}
	l.Reset(at(past + time.Second))
	st = state(t, l, at(past+2*time.Second), "wired.example")
	if !st.LastRequestAt.Equal(at(past+100*time.Millisecond)) || !st.RebuildLossAt.Equal(at(past+time.Second)) {
		t.Errorf("after a loss in flight: last_request_at %v, rebuild_loss_at %v", st.LastRequestAt, st.RebuildLossAt)
	}
	wired.Done()
	// A request after the loss is shown as itself.
	done(mustAllow(t, l, at(past+3*time.Second), "wired.example", time.Second))
	st = state(t, l, at(past+4*time.Second), "wired.example")
	if !st.LastRequestAt.Equal(at(past+3*time.Second)) || !st.RebuildLossAt.IsZero() {
		t.Errorf("after a new request: %+v", st)
	}
}

// done completes an admission returned by value.
func done(a Admission) { a.Done() }

// TestCountsFrom: the instant the next interval counts from includes the loss, which
// downloader.DomainState shows apart.
func TestCountsFrom(t *testing.T) {
	l, _ := newFake() // lost at t0
	if _, ok := l.CountsFrom("none.example"); ok {
		t.Error("CountsFrom of an unknown domain: ok")
	}
	a := mustAllow(t, l, at(time.Second), "d.example", 500*time.Millisecond)
	if from, ok := l.CountsFrom("d.example"); !ok || !from.Equal(at(time.Second)) {
		t.Errorf("CountsFrom after an admission = %v %v", from, ok)
	}
	a.Cancel()
	if from, ok := l.CountsFrom("d.example"); !ok || !from.Equal(t0) {
		t.Errorf("CountsFrom after a cancel = %v %v, want the loss at t0", from, ok)
	}
}

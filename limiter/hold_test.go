package limiter

import (
	"downloader"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"downloader/retryafter"
)

// TestHoldDomainAdmissionRule: during an origin's wait every entry's admission refuses or
// waits until its end, whatever the interval, and afterwards the interval rules again.
// Instants are fixed: base is the moment of the 429.
func TestHoldDomainAdmissionRule(t *testing.T) {
	base := at(past)
	const I = time.Second
	tests := []struct {
		name     string
		wait     time.Duration // the hold asked at base
		now      time.Duration // the decision, after base
		interval time.Duration
		want     time.Duration // Allow's wait; 0: admitted
	}{
		{"refused at once", 30 * time.Second, 0, I, 30 * time.Second},
		{"the remaining wait", 30 * time.Second, 10 * time.Second, I, 20 * time.Second},
		{"a nanosecond before its end", 30 * time.Second, 30*time.Second - 1, I, 1},
		{"admitted at its end", 30 * time.Second, 30 * time.Second, I, 0},
		{"interval 0 is held too", 30 * time.Second, time.Second, 0, 29 * time.Second},
		{"a longer interval still rules", time.Second, 2 * time.Second, 10 * time.Second, 8 * time.Second},
		{"no hold: the interval", 0, 500 * time.Millisecond, I, 500 * time.Millisecond},
		{"a negative wait is none", -time.Hour, 500 * time.Millisecond, I, 500 * time.Millisecond},
		{"capped at the longest wait", 10 * retryafter.MaxWait, retryafter.MaxWait - time.Second, I, time.Second},
		{"capped: admitted at the longest wait", 10 * retryafter.MaxWait, retryafter.MaxWait, I, 0},
		{"saturated, never wrapped", math.MaxInt64, time.Minute, I, retryafter.MaxWait - time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newFake()
			done(mustAllow(t, l, base, "a.example", tt.interval)) // the request answered 429
			l.HoldDomain(base, "a.example", tt.wait)
			now := base.Add(tt.now)
			if tt.want == 0 {
				done(mustAllow(t, l, now, "a.example", tt.interval))
			} else {
				mustRefuse(t, l, now, "a.example", tt.interval, tt.want)
			}
			// Reserve (entry A) gives the same slot.
			l2, _ := newFake()
			done(mustAllow(t, l2, base, "a.example", tt.interval))
			l2.HoldDomain(base, "a.example", tt.wait)
			a, delay, ok := l2.Reserve(now, "a.example", tt.interval, srcLease, entryA, time.Time{})
			if !ok || delay != tt.want || !a.Slot().Equal(now.Add(tt.want)) {
				t.Fatalf("Reserve: ok %v delay %v slot %v, want delay %v", ok, delay, a.Slot().Sub(base), tt.want)
			}
			a.Cancel()
		})
	}
}

// TestHoldNeverShortens: a later, shorter hold keeps the longer one; a longer one extends it.
func TestHoldNeverShortens(t *testing.T) {
	l, _ := newFake()
	base := at(past)
	if got := l.HoldDomain(base, "a.example", time.Minute); !got.Equal(base.Add(time.Minute)) {
		t.Fatalf("hold until %v, want base + 1 min", got.Sub(base))
	}
	if got := l.HoldDomain(base.Add(time.Second), "a.example", time.Second); !got.Equal(base.Add(time.Minute)) {
		t.Fatalf("a shorter hold moved the end to %v, want base + 1 min", got.Sub(base))
	}
	mustRefuse(t, l, base.Add(30*time.Second), "a.example", 0, 30*time.Second)
	if got := l.HoldDomain(base.Add(time.Second), "a.example", 2*time.Minute); !got.Equal(base.Add(121 * time.Second)) {
		t.Fatalf("a longer hold ends at %v, want base + 121 s", got.Sub(base))
	}
	done(mustAllow(t, l, base.Add(time.Minute), "b.example", 0)) // another domain is not held
}

// TestHoldReserveDeadline: entry A's reservation past the lease's deadline is refused with
// the remaining wait (the task goes back).
func TestHoldReserveDeadline(t *testing.T) {
	l, _ := newFake()
	base := at(past)
	l.HoldDomain(base, "a.example", 10*time.Minute)
	_, delay, ok := l.Reserve(base.Add(time.Minute), "a.example", time.Second, srcLease, entryA, base.Add(5*time.Minute))
	if ok || delay != 9*time.Minute {
		t.Fatalf("Reserve past the deadline: ok %v delay %v, want refused with 9 min", ok, delay)
	}
}

// TestHoldStopsAnAdmittedRequestAtTheWire: a request admitted before the origin asked for
// a wait (a reservation whose slot came, a B request between admission and connect) does
// not go on the wire before the wait's end; HeldFor tells the reservation.
func TestHoldStopsAnAdmittedRequestAtTheWire(t *testing.T) {
	l, _ := newFake()
	base := at(past)
	a := mustAllow(t, l, base, "a.example", 0)
	r, _, ok := l.Reserve(base, "a.example", time.Second, srcLease, entryA, time.Time{})
	if !ok {
		t.Fatal("Reserve refused")
	}
	l.HoldDomain(base, "a.example", time.Minute)
	if d := a.Wire(base.Add(time.Second)); d != time.Minute-time.Second {
		t.Fatalf("Wire during the hold: %v, want the remaining 59 s", d)
	}
	if d := r.HeldFor(base.Add(time.Second)); d != time.Minute-time.Second {
		t.Fatalf("HeldFor = %v, want 59 s", d)
	}
	if d := a.Wire(base.Add(time.Minute)); d != 0 {
		t.Fatalf("Wire at the hold's end: %v, want 0", d)
	}
	if d := r.HeldFor(base.Add(time.Minute)); d != 0 {
		t.Fatalf("HeldFor at the end = %v, want 0", d)
	}
	// Once on the wire, a request's later writes are not held back.
	l.HoldDomain(base.Add(time.Minute), "a.example", time.Minute)
	if d := a.WriteAndHold(base.Add(time.Minute)); d != 0 {
		t.Fatalf("the write of a request on the wire waited %v", d)
	}
	a.Done()
	r.Cancel()
}

// TestHoldKeptBySweepResetAndSave: the hold keeps its entry from the sweep and a reset,
// is saved at a clean stop and restored at the next start, and shows as hold_until_at.
func TestHoldKeptBySweepResetAndSave(t *testing.T) {
	l, _ := newFake()
	base := at(past)
	// A domain with no request in 24 h and no interval to wait: only the hold keeps it.
	l.HoldDomain(base, "a.example", 30*time.Minute)
	if n := l.Sweep(base.Add(time.Minute)); n != 0 {
		t.Fatalf("Sweep dropped %d entries during the hold", n)
	}
	l.Reset(base.Add(2 * time.Minute))
	mustRefuse(t, l, base.Add(3*time.Minute), "a.example", time.Second, 27*time.Minute)

	st := state(t, l, base.Add(3*time.Minute), "a.example")
	if !st.HoldUntilAt.Equal(base.Add(30 * time.Minute)) {
		t.Fatalf("hold_until_at = %v, want base + 30 min", st.HoldUntilAt)
	}
	b, _ := json.Marshal(st)
	if !strings.Contains(string(b), `"hold_until_at":"`+base.Add(30*time.Minute).Format(time.RFC3339Nano)+`"`) {
		t.Fatalf("JSON %s has no hold_until_at", b)
	}

	snap := l.Save(base.Add(10 * time.Minute))
	var saved *downloader.SavedDomain
	for i := range snap.Entries {
		if snap.Entries[i].Domain == "a.example" {
			saved = &snap.Entries[i]
		}
	}
	if saved == nil || !saved.HoldUntil.Equal(base.Add(30*time.Minute)) {
		t.Fatalf("saved %+v, want a.example with its hold until base + 30 min", saved)
	}
	l2, _ := newFake()
	l2.Restore(base.Add(15*time.Minute), snap)
	mustRefuse(t, l2, base.Add(15*time.Minute), "a.example", 0, 15*time.Minute)
	done(mustAllow(t, l2, base.Add(30*time.Minute), "a.example", 0))

	// After the hold, the entry goes as any other and shows no hold.
	if st := state(t, l, base.Add(31*time.Minute), "a.example"); !st.HoldUntilAt.IsZero() {
		t.Fatalf("hold_until_at = %v after the hold", st.HoldUntilAt)
	}
	b, _ = json.Marshal(state(t, l, base.Add(31*time.Minute), "a.example"))
	if strings.Contains(string(b), "hold_until_at") {
		t.Fatalf("JSON %s shows a hold that is over", b)
	}
}

// TestHoldRestoreCapped: a saved hold further than the longest wait from its save (a
// table written by hand or by an older process) is restored capped.
func TestHoldRestoreCapped(t *testing.T) {
	l, _ := newFake()
	base := at(past)
	l.Restore(base, downloader.RuntimeSnapshot{SavedAt: base, Entries: []downloader.SavedDomain{{Domain: "a.example", LastRequestAt: base,
		HoldUntil: base.Add(100 * 365 * 24 * time.Hour)}}})
	mustRefuse(t, l, base, "a.example", 0, retryafter.MaxWait)
}

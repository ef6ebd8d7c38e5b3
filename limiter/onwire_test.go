package limiter

import (
	"context"
	"downloader/clock/clocktest"
	"slices"
	"testing"
	"time"

	"downloader"
)

// TestOnWireTellsTheWireMomentOnce: the callback set with OnWire, and the limiter's
// observer set with ObserveWire, hear the wire moment once: at Wire, or for WireAndHold at
// Wrote (or Done when Wrote never came); never for a request that did not go out, nor for
// a call that had to wait.
func TestOnWireTellsTheWireMomentOnce(t *testing.T) {
	const iv = 100 * time.Millisecond
	cases := []struct {
		name string
		run  func(clk *clocktest.Fake, a *Admission)
		want time.Duration // after the admission; -1: never told
	}{
		{"Wire", func(clk *clocktest.Fake, a *Admission) {
			clk.Advance(3 * time.Millisecond)
			a.Wire(clk.Now())
			clk.Advance(time.Millisecond)
			a.Wrote()
			a.Done()
		}, 3 * time.Millisecond},
		{"WireAndHold then Wrote", func(clk *clocktest.Fake, a *Admission) {
			a.WireAndHold(clk.Now())
			clk.Advance(7 * time.Millisecond) // the write came late
			a.Wrote()
			clk.Advance(time.Second)
			a.Done()
		}, 7 * time.Millisecond},
		{"WireAndHold then Done", func(clk *clocktest.Fake, a *Admission) {
			a.WireAndHold(clk.Now())
			clk.Advance(20 * time.Millisecond)
			a.Cancel() // degrades to Done: the write, if any, is over by now
		}, 20 * time.Millisecond},
		{"never on the wire", func(clk *clocktest.Fake, a *Admission) {
			clk.Advance(time.Second)
			a.Cancel()
		}, -1},
	}
	for _, tc := range cases {
		for _, via := range []string{"OnWire", "ObserveWire", "both"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				clk := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
				l := New(clk)
				var observed []time.Time
				if via != "OnWire" {
					l.ObserveWire(func(domain string, interval time.Duration, at time.Time) {
						if domain != "o.test" || interval != iv {
							t.Errorf("observed %q %v, want o.test %v", domain, interval, iv)
						}
						observed = append(observed, at)
					})
				}
				clk.Advance(time.Hour)
				a, wait := l.Allow(clk.Now(), "o.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
				if wait != 0 {
					t.Fatalf("not admitted: %v", wait)
				}
				start := clk.Now()
				var told []time.Time
				if via != "ObserveWire" {
					a.OnWire(func(at time.Time) { told = append(told, at) })
				}
				tc.run(clk, &a)
				if via == "both" && !slices.Equal(told, observed) {
					t.Errorf("OnWire told %v, ObserveWire %v: want the same", told, observed)
				}
				if via == "ObserveWire" {
					told = observed
				}
				switch {
				case tc.want < 0 && len(told) != 0:
					t.Errorf("told %v; want nothing", told)
				case tc.want >= 0 && (len(told) != 1 || !told[0].Equal(start.Add(tc.want))):
					t.Errorf("told %v; want once at +%v", told, tc.want)
				}
			})
		}
	}
}

// TestOnWireNotToldWhileWaiting: a Wire that must wait for another request's interval
// tells nothing until it lets the request out.
func TestOnWireNotToldWhileWaiting(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(clk)
	clk.Advance(time.Hour)
	const iv = 100 * time.Millisecond
	a, _ := l.Allow(clk.Now(), "p.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
	b, _, _ := l.Reserve(clk.Now(), "p.test", iv, downloader.IntervalSourceRequest, downloader.EntryLease, time.Time{})
	var told []time.Time
	b.OnWire(func(at time.Time) { told = append(told, at) })
	if d := b.Wire(clk.Now()); d == 0 {
		t.Fatal("b went out before its slot")
	}
	if len(told) != 0 {
		t.Fatalf("told %v before b went out", told)
	}
	a.Wire(clk.Now())
	clk.Advance(iv)
	if d := b.Wire(clk.Now()); d != 0 {
		t.Fatalf("b at its slot: wait %v", d)
	}
	if len(told) != 1 || !told[0].Equal(clk.Now()) {
		t.Errorf("told %v; want once, now", told)
	}
	a.Done()
	b.Done()
}

// TestWaitWireAfterTheContextEnded: a request whose context ended does not go on the wire,
// even when its turn is now (in cluster mode its in-flight entry may have expired for the
// other instances), and the domain stays free for the next one.
func TestWaitWireAfterTheContextEnded(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(clk)
	clk.Advance(time.Hour)
	a, wait := l.Allow(clk.Now(), "o.test", 100*time.Millisecond, downloader.IntervalSourceRequest, downloader.EntryProbe)
	if wait != 0 {
		t.Fatalf("not admitted: %v", wait)
	}
	told := 0
	a.OnWire(func(time.Time) { told++ })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, wait := range []func(context.Context) error{a.WaitWire, a.WaitWireAndHold} {
		if err := wait(ctx); err == nil {
			t.Errorf("wait for the wire with an ended context: nil error, want the context's")
		}
	}
	a.Cancel()
	if told != 0 {
		t.Errorf("OnWire told %d times for a request that never went out", told)
	}
	clk.Advance(time.Millisecond)
	if _, wait := l.Allow(clk.Now(), "o.test", 100*time.Millisecond, downloader.IntervalSourceRequest, downloader.EntryProbe); wait != 0 {
		t.Errorf("the next request waits %v after one that never went out", wait)
	}
}

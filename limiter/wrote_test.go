package limiter

import (
	"downloader/clock/clocktest"
	"testing"
	"time"

	"downloader"
)

// TestWroteMovesTheWireMomentToTheWrite: a request whose write came late (its goroutine
// was descheduled after Wire) anchors the next request at the write, not at Wire.
func TestWroteMovesTheWireMomentToTheWrite(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(clk)
	clk.Advance(time.Hour)
	const iv = 100 * time.Millisecond
	a, _ := l.Allow(clk.Now(), "w.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
	if d := a.Wire(clk.Now()); d != 0 {
		t.Fatalf("Wire = %v", d)
	}
	clk.Advance(7 * time.Millisecond) // the write happens 7 ms after Wire
	a.Wrote()
	a.Done()
	clk.Advance(iv - 7*time.Millisecond)
	if _, wait := l.Allow(clk.Now(), "w.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe); wait != 7*time.Millisecond {
		t.Errorf("next request's wait = %v, want 7ms (interval from the write)", wait)
	}
	// Wrote of a request that is no longer the latest to go out changes nothing.
	clk.Advance(time.Second)
	b, _ := l.Allow(clk.Now(), "w.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
	b.Wire(clk.Now())
	clk.Advance(iv)
	c, _ := l.Allow(clk.Now(), "w.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
	c.Wire(clk.Now())
	clk.Advance(50 * time.Millisecond)
	b.Wrote()
	clk.Advance(50 * time.Millisecond)
	if _, wait := l.Allow(clk.Now(), "w.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe); wait != 0 {
		t.Errorf("a stale Wrote moved the domain: wait %v", wait)
	}
	var zero Admission
	zero.Wrote() // no-op on a zero admission
}

// TestWireAndHoldHoldsTheNextRequestUntilWrote: a request that went out through
// WireAndHold keeps the domain's next request waiting until it says Wrote, so a writer
// descheduled between the decision and the write cannot be followed early.
func TestWireAndHoldHoldsTheNextRequestUntilWrote(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(clk)
	clk.Advance(time.Hour)
	const iv = 10 * time.Millisecond
	allow := func() Admission {
		a, wait := l.Allow(clk.Now(), "h.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
		if wait != 0 {
			t.Fatalf("not admitted: wait %v", wait)
		}
		return a
	}
	a := allow()
	clk.Advance(iv)
	b := allow()
	// a was admitted first but b reaches the wire first and holds it.
	if d := b.WireAndHold(clk.Now()); d != 0 {
		t.Fatalf("b.WireAndHold = %v", d)
	}
	clk.Advance(15 * time.Millisecond)
	if d := a.Wire(clk.Now()); d != holdPoll {
		t.Fatalf("a.Wire while b holds = %v, want a poll of %v", d, holdPoll)
	}
	clk.Advance(15 * time.Millisecond) // b's write returns 30 ms after its wire decision
	b.Wrote()
	if d := a.Wire(clk.Now()); d != iv {
		t.Errorf("a.Wire after b wrote = %v, want a full interval from b's write", d)
	}
	clk.Advance(iv)
	if d := a.Wire(clk.Now()); d != 0 {
		t.Errorf("a.Wire an interval after b's write = %v", d)
	}
	a.Done()
	b.Done()

	// A writer that never says Wrote holds for at most writeHoldMax.
	clk.Advance(time.Second)
	c := allow()
	c.WireAndHold(clk.Now())
	clk.Advance(iv)
	d := allow()
	if w := d.Wire(clk.Now()); w != holdPoll {
		t.Errorf("within the hold: wait %v, want %v", w, holdPoll)
	}
	clk.Advance(writeHoldMax - iv)
	if w := d.Wire(clk.Now()); w != iv {
		t.Errorf("after an unreported hold: wait %v, want %v (an interval from the hold's end)", w, iv)
	}
}

package limiter

import (
	"testing"
	"time"

	"downloader"
	"downloader/clock"
)

// TestWroteMovesTheWireMomentToTheWrite: a request whose write came late (its goroutine
// was descheduled after Wire) anchors the next request at the write, not at Wire.
func TestWroteMovesTheWireMomentToTheWrite(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
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

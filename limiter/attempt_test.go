package limiter

import (
	"context"
	"downloader/clock/clocktest"
	"testing"
	"time"

	"downloader"
)

// TestConnectAttemptSpendsTheSlot: a request wired at its connection attempt holds the
// domain through a slow handshake, its write moves the wire moment forward, and a failed
// attempt is not given back by Cancel (SPEC §2, a spent slot).
func TestConnectAttemptSpendsTheSlot(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(clk)
	clk.Advance(time.Hour)
	const iv = 100 * time.Millisecond
	allow := func() (Admission, time.Duration) {
		return l.Allow(clk.Now(), "c.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
	}

	// Connected, then written 300 ms later (a slow TLS handshake): the next request is
	// held meanwhile and spaced from the write.
	a, _ := allow()
	if d := a.WireAndHold(clk.Now()); d != 0 {
		t.Fatalf("WireAndHold at the attempt = %v", d)
	}
	clk.Advance(iv + 200*time.Millisecond)
	b, wait := allow()
	if wait != 0 {
		t.Fatalf("b refused by Allow (%v): last_request_at should be the attempt", wait)
	}
	if d := b.WireAndHold(clk.Now()); d != holdPoll {
		t.Fatalf("b.WireAndHold during a's handshake = %v, want a poll of %v", d, holdPoll)
	}
	clk.Advance(100 * time.Millisecond)
	if d := a.WriteAndHold(clk.Now()); d != 0 {
		t.Fatalf("a.WriteAndHold = %v", d)
	}
	clk.Advance(2 * time.Millisecond)
	a.Wrote()
	if d := b.WireAndHold(clk.Now()); d != iv {
		t.Errorf("b after a's write = %v, want a full interval from the write", d)
	}
	a.Done()
	b.Cancel()

	// A failed attempt: EndHold, then Cancel keeps the slot spent; the next request waits
	// an interval from the attempt's start, not from the failure.
	clk.Advance(time.Second)
	c, _ := allow()
	c.WireAndHold(clk.Now())
	clk.Advance(30 * time.Millisecond) // connection refused after 30 ms
	c.EndHold()
	c.Cancel()
	if _, wait := allow(); wait != iv-30*time.Millisecond {
		t.Errorf("after a failed attempt: wait %v, want %v (an interval from the attempt)", wait, iv-30*time.Millisecond)
	}

	// Nothing on the wire (a DNS failure, the SSRF guard): Cancel gives the slot back.
	clk.Advance(time.Second)
	d, _ := allow()
	d.Cancel()
	e, wait := allow()
	if wait != 0 {
		t.Errorf("after a request that never went out: wait %v, want 0", wait)
	}
	e.Cancel()
}

// TestWriteAfterTheHoldRanOut: a handshake longer than writeHoldMax lets the next request
// out at the hold's end; the first request's write then waits an interval after it.
func TestWriteAfterTheHoldRanOut(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(clk)
	clk.Advance(time.Hour)
	const iv = 100 * time.Millisecond
	a, _ := l.Allow(clk.Now(), "h.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
	a.WireAndHold(clk.Now())
	clk.Advance(writeHoldMax + iv)
	b, wait := l.Allow(clk.Now(), "h.test", iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
	if wait != 0 {
		t.Fatalf("b refused: %v", wait)
	}
	if d := b.WireAndHold(clk.Now()); d != 0 {
		t.Fatalf("b.WireAndHold after a's hold ran out = %v", d)
	}
	if d := a.WriteAndHold(clk.Now()); d != holdPoll {
		t.Fatalf("a.WriteAndHold while b holds = %v, want %v", d, holdPoll)
	}
	b.Wrote()
	if d := a.WriteAndHold(clk.Now()); d != iv {
		t.Errorf("a.WriteAndHold after b wrote = %v, want %v", d, iv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.WaitWriteAndHold(ctx); err == nil {
		t.Errorf("WaitWriteAndHold with an ended context let the write out")
	}
	a.Done()
	b.Done()
}

// TestOnWireToldOnceAtTheWrite: a request wired at its attempt and written later tells
// its OnWire callback once, with the write's moment.
func TestOnWireToldOnceAtTheWrite(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(clk)
	clk.Advance(time.Hour)
	a, _ := l.Allow(clk.Now(), "o.test", time.Second, downloader.IntervalSourceRequest, downloader.EntryProbe)
	var told []time.Time
	a.OnWire(func(at time.Time) { told = append(told, at) })
	a.WireAndHold(clk.Now())
	clk.Advance(40 * time.Millisecond)
	a.WriteAndHold(clk.Now())
	clk.Advance(time.Millisecond)
	want := clk.Now()
	a.Wrote()
	a.Done()
	if len(told) != 1 || !told[0].Equal(want) {
		t.Errorf("OnWire told %v, want once at the write's return %v", told, want)
	}
}

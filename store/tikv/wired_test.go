package tikv

import (
	"testing"
	"time"

	"downloader"
	"downloader/limiter"
)

// TestRuntimeWiredWriteBack: another instance's request that went on the wire at t (its
// local admission's OnWire queued the moment) holds the domain until t+I+skew, not until
// the request ends or its entry expires; a Wired write-back that never arrives leaves the
// conservative rule (refused while in flight).
func TestRuntimeWiredWriteBack(t *testing.T) {
	rg := newRig(t)
	x, y := rg.instance("x", 8), rg.instance("y", 8)
	const d, I = "wired.example", time.Second
	skew := 50 * time.Millisecond
	rg.clk.Advance(time.Hour) // past the loss marker's interval

	// x admits locally and cluster-wide; its request goes on the wire 300 ms later (a slow
	// handshake) through the limiter's WireAndHold, the write itself 2 ms after.
	lim := limiter.New(rg.clk)
	rg.clk.Advance(time.Hour)
	for _, in := range []*instance{x, y} {
		if err := in.rt.Heartbeat(t.Context()); err != nil { // live again after the jump
			t.Fatal(err)
		}
	}
	adm, wait := lim.Allow(rg.clk.Now(), d, I, downloader.IntervalSourceRequest, downloader.EntryRender)
	if wait != 0 {
		t.Fatalf("local admission: wait %v", wait)
	}
	t1 := rg.clk.Now()
	tk, wait := x.admit(t, ask(d, I, t1))
	if tk == nil || wait != 0 {
		t.Fatalf("x: %v %v", tk, wait)
	}
	adm.OnWire(tk.Wired)
	stop := x.rt.startWriter()
	rg.clk.Advance(300 * time.Millisecond)
	if w := adm.WireAndHold(rg.clk.Now()); w != 0 {
		t.Fatalf("Wire: %v", w)
	}
	rg.clk.Advance(2 * time.Millisecond)
	adm.Wrote()
	wire := rg.clk.Now()
	stop() // writes what is queued: the Wired write-back
	st, err := y.rt.Domain(t.Context(), d)
	if err != nil || st.InFlightCount != 1 || !st.LastRequestAt.Equal(wire) {
		t.Fatalf("Domain after Wired = %+v, %v; want last_request_at %v, 1 in flight", st, err, wire)
	}
	if len(st.InFlightRequests) != 1 || !st.InFlightRequests[0].WireAt.Equal(wire) || !st.InFlightRequests[0].IsInstanceLive {
		t.Fatalf("in-flight entries = %+v; want one wired at %v", st.InFlightRequests, wire)
	}

	// y: 1 ms before wire+I+skew it is told to wait 1 ms; at wire+I+skew it is admitted,
	// while x's request is still in flight (long before its entry would expire).
	rg.clk.Set(wire.Add(I + skew - time.Millisecond))
	if tk2, wait := y.admit(t, ask(d, I, rg.clk.Now())); tk2 != nil || wait != time.Millisecond {
		t.Fatalf("y 1ms before wire+I+skew: %v %v; want a refusal for 1ms", tk2, wait)
	}
	rg.clk.Advance(time.Millisecond)
	tk2, wait := y.admit(t, ask(d, I, rg.clk.Now()))
	if tk2 == nil || wait != 0 {
		t.Fatalf("y at wire+I+skew, x still in flight: %v %v; want admitted", tk2, wait)
	}
	tk.Done(t.Context(), wire) // x's write-back without the writer: written at once
	adm.Done()

	// Fail-safe: y's request is not wired (the write-back lost); x waits until it ends.
	rg.clk.Advance(5 * I)
	if tk3, wait := x.admit(t, ask(d, I, rg.clk.Now())); tk3 != nil || wait <= 0 {
		t.Fatalf("x while y's request is in flight, wire moment unknown: %v %v; want a refusal", tk3, wait)
	}
	tk2.Wired(rg.clk.Now()) // no writer running: dropped, never blocks
	if tk3, _ := x.admit(t, ask(d, I, rg.clk.Now())); tk3 != nil {
		t.Fatal("x admitted after a Wired that was dropped")
	}
	tk2.Done(t.Context(), rg.clk.Now())
}

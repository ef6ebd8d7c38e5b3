package limiter

import (
	"context"
	"errors"
	"testing"
	"time"

	"downloader"
)

// TestAllowAdmissionRule checks t >= last_request_at + I, decided at the instant passed in,
// with the interval of the request as given and the exact wait on refusal.
func TestAllowAdmissionRule(t *testing.T) {
	const d = "example.com"
	first := at(past)
	tests := []struct {
		name      string
		firstI    time.Duration // interval of the admitted first request at first
		after     time.Duration // the second request comes at first+after
		secondI   time.Duration
		wantAdmit bool
		wantWait  time.Duration
	}{
		{"exactly at last+I", time.Second, time.Second, time.Second, true, 0},
		{"one nanosecond early", time.Second, time.Second - 1, time.Second, false, 1},
		{"same instant", time.Second, 0, time.Second, false, time.Second},
		{"handshake-sized gap", time.Second, 300 * time.Millisecond, time.Second, false, 700 * time.Millisecond},
		{"long after", time.Second, time.Hour, time.Second, true, 0},
		// The interval is used as given: never a max with the previous request's.
		{"smaller interval honoured", 10 * time.Second, time.Second, time.Second, true, 0},
		{"smaller interval still refused before", 10 * time.Second, 999 * time.Millisecond, time.Second, false, time.Millisecond},
		{"larger interval of this request", time.Second, 5 * time.Second, 10 * time.Second, false, 5 * time.Second},
		{"zero interval", time.Second, 0, 0, true, 0},
		{"largest accepted interval", time.Second, downloader.MaxMinInterval - 1, downloader.MaxMinInterval, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newFake()
			a := mustAllow(t, l, first, d, tc.firstI)
			a.Done()
			now := first.Add(tc.after)
			b, wait := l.Allow(now, d, tc.secondI, srcRequest, entryB)
			if b.Admitted() != tc.wantAdmit || wait != tc.wantWait {
				t.Fatalf("Allow = (admitted %v, wait %v), want (%v, %v)", b.Admitted(), wait, tc.wantAdmit, tc.wantWait)
			}
			st := state(t, l, now, d)
			wantLast := first
			if tc.wantAdmit {
				wantLast = now
				if b.Slot() != now {
					t.Errorf("Slot = %v, want the decision instant %v", b.Slot(), now)
				}
			}
			if !st.LastRequestAt.Equal(wantLast) {
				t.Errorf("last_request_at = %v, want %v", st.LastRequestAt, wantLast)
			}
		})
	}
}

// TestAllowRefusalChangesNothing: a refusal leaves last_request_at, in_flight_count, the
// interval and its source as they were, and the same refusal repeats with a shorter wait.
func TestAllowRefusalChangesNothing(t *testing.T) {
	l, _ := newFake()
	const d = "example.com"
	first := at(past)
	a := mustAllow(t, l, first, d, 2*time.Second)
	before := state(t, l, first, d)
	for i, off := range []time.Duration{0, 500 * time.Millisecond, 1999 * time.Millisecond} {
		now := first.Add(off)
		b, wait := l.Allow(now, d, 2*time.Second, srcDefault, entryC)
		if b.Admitted() || wait != 2*time.Second-off {
			t.Fatalf("#%d: Allow = (%v, %v), want refused with %v", i, b.Admitted(), wait, 2*time.Second-off)
		}
		st := state(t, l, now, d)
		if !st.LastRequestAt.Equal(before.LastRequestAt) || st.InFlightCount != 1 ||
			st.MinIntervalMs != 2000 || st.IntervalSource != srcRequest {
			t.Fatalf("#%d: a refusal changed the state: %+v, was %+v", i, st, before)
		}
		// The zero Admission's methods do nothing.
		b.Done()
		b.Cancel()
		if w := b.Wire(now); w != 0 {
			t.Fatalf("Wire on a refused admission = %v", w)
		}
	}
	if st := state(t, l, first, d); st.InFlightCount != 1 {
		t.Fatalf("in_flight_count = %d after refusals, want 1", st.InFlightCount)
	}
	a.Done()
}

// TestAllowDecidesAtTheInstantGiven: the limiter does not look at its clock to decide or
// to stamp last_request_at; a caller that decided at t is judged at t.
func TestAllowDecidesAtTheInstantGiven(t *testing.T) {
	l, clk := newFake()
	const d = "example.com"
	decided := at(past)
	clk.Set(decided.Add(time.Hour)) // the clock has moved on since the decision
	a := mustAllow(t, l, decided, d, time.Second)
	if st := state(t, l, decided, d); !st.LastRequestAt.Equal(decided) {
		t.Fatalf("last_request_at = %v, want the decision instant %v", st.LastRequestAt, decided)
	}
	mustRefuse(t, l, decided.Add(999*time.Millisecond), d, time.Second, time.Millisecond)
	a.Done()
}

// TestIntervalSourceRecorded: min_interval_ms and interval_source are those of the latest
// admitted request.
func TestIntervalSourceRecorded(t *testing.T) {
	l, _ := newFake()
	const d = "example.com"
	now := at(past)
	if _, _, ok := l.IntervalOf(d); ok {
		t.Fatal("IntervalOf an unknown domain: ok")
	}
	steps := []struct {
		interval time.Duration
		source   downloader.IntervalSource
		entry    downloader.Entry
	}{
		{time.Second, srcDefault, entryC},
		{3 * time.Second, srcRequest, entryB},
		{1500 * time.Millisecond, srcLease, entryA},
		{time.Second, srcDefault, entryB},
	}
	for i, s := range steps {
		now = now.Add(time.Hour)
		a, wait := l.Allow(now, d, s.interval, s.source, s.entry)
		if !a.Admitted() {
			t.Fatalf("#%d refused (wait %v)", i, wait)
		}
		a.Done()
		iv, src, ok := l.IntervalOf(d)
		if !ok || iv != s.interval || src != s.source {
			t.Fatalf("#%d: IntervalOf = (%v, %q, %v), want (%v, %q)", i, iv, src, ok, s.interval, s.source)
		}
		st := state(t, l, now, d)
		if st.MinIntervalMs != s.interval.Milliseconds() || st.IntervalSource != s.source {
			t.Fatalf("#%d: state = %+v", i, st)
		}
	}
}

// TestNewIsConservative: a new limiter (a restart) treats every domain as requested at the
// moment it was created.
func TestNewIsConservative(t *testing.T) {
	l, _ := newFake()
	mustRefuse(t, l, t0, "a.example", time.Second, time.Second)
	mustRefuse(t, l, at(time.Second-1), "b.example", time.Second, 1)
	mustRefuse(t, l, at(time.Minute), "c.example", time.Hour, time.Hour-time.Minute)
	a := mustAllow(t, l, at(time.Second), "b.example", time.Second)
	a.Done()
	a = mustAllow(t, l, t0, "d.example", 0)
	a.Done()
}

// TestWireMovesLastRequestForward: a request admitted at t whose handshake takes 300 ms
// goes on the wire at t+300ms, and the next one (I = 1 s) is refused until t+1.3s.
func TestWireMovesLastRequestForward(t *testing.T) {
	l, _ := newFake()
	const d = "example.com"
	start := at(past)
	a := mustAllow(t, l, start, d, time.Second)
	if w := a.Wire(start.Add(300 * time.Millisecond)); w != 0 {
		t.Fatalf("Wire = %v, want 0", w)
	}
	if st := state(t, l, start.Add(time.Second), d); !st.LastRequestAt.Equal(start.Add(300 * time.Millisecond)) {
		t.Fatalf("last_request_at = %v, want the wire moment", st.LastRequestAt)
	}
	mustRefuse(t, l, start.Add(time.Second), d, time.Second, 300*time.Millisecond)
	mustRefuse(t, l, start.Add(1300*time.Millisecond-1), d, time.Second, 1)
	a.Done()
	b := mustAllow(t, l, start.Add(1300*time.Millisecond), d, time.Second)
	// A second Wire of a request already on the wire changes nothing.
	if w := b.Wire(start.Add(1300 * time.Millisecond)); w != 0 {
		t.Fatalf("Wire = %v", w)
	}
	if w := b.Wire(start.Add(2 * time.Second)); w != 0 {
		t.Fatalf("second Wire = %v", w)
	}
	if st := state(t, l, start.Add(2*time.Second), d); !st.LastRequestAt.Equal(start.Add(1300 * time.Millisecond)) {
		t.Fatalf("a second Wire moved last_request_at to %v", st.LastRequestAt)
	}
	b.Done()
}

// TestWireInterleavings walks through orders in which another request to the same domain
// is admitted or goes out between an admission and its Wire.
func TestWireInterleavings(t *testing.T) {
	const d = "example.com"
	const I = time.Second
	s := at(past)
	ms := func(n int) time.Time { return s.Add(time.Duration(n) * time.Millisecond) }

	t.Run("admitted after, wires first", func(t *testing.T) {
		// a admitted at 0, slow handshake; b admitted at 1000 (a is not on the wire
		// yet, last = 0); b goes out at 1050; a is ready at 1200 and must wait until
		// 2050.
		l, _ := newFake()
		a := mustAllow(t, l, ms(0), d, I)
		b := mustAllow(t, l, ms(1000), d, I)
		if w := b.Wire(ms(1050)); w != 0 {
			t.Fatalf("b.Wire = %v", w)
		}
		if w := a.Wire(ms(1200)); w != 850*time.Millisecond {
			t.Fatalf("a.Wire = %v, want 850ms", w)
		}
		if w := a.Wire(ms(2050)); w != 0 {
			t.Fatalf("a.Wire at 2050 = %v", w)
		}
		mustRefuse(t, l, ms(3049), d, I, time.Millisecond)
		a.Done()
		b.Done()
	})

	t.Run("admitted after, still in its handshake", func(t *testing.T) {
		// a admitted at 0; b admitted at 1000; a is ready at 1100 while b is still in
		// its handshake: b was admitted to start at 1000, so a waits until 2000.
		l, _ := newFake()
		a := mustAllow(t, l, ms(0), d, I)
		b := mustAllow(t, l, ms(1000), d, I)
		if w := a.Wire(ms(1100)); w != 900*time.Millisecond {
			t.Fatalf("a.Wire = %v, want 900ms", w)
		}
		if w := b.Wire(ms(1200)); w != 0 {
			t.Fatalf("b.Wire = %v", w)
		}
		// b went out at 1200: a now waits until 2200.
		if w := a.Wire(ms(2000)); w != 200*time.Millisecond {
			t.Fatalf("a.Wire at 2000 = %v, want 200ms", w)
		}
		if w := a.Wire(ms(2200)); w != 0 {
			t.Fatalf("a.Wire at 2200 = %v", w)
		}
		a.Done()
		b.Done()
	})

	t.Run("a waiting turn is not taken by a new admission", func(t *testing.T) {
		// a waits for b as above; a new request arriving when a's turn comes is
		// refused: a's turn is held.
		l, _ := newFake()
		a := mustAllow(t, l, ms(0), d, I)
		b := mustAllow(t, l, ms(1000), d, I)
		if w := b.Wire(ms(1000)); w != 0 {
			t.Fatalf("b.Wire = %v", w)
		}
		if w := a.Wire(ms(1500)); w != 500*time.Millisecond {
			t.Fatalf("a.Wire = %v, want 500ms", w)
		}
		if c, wait := l.Allow(ms(2000), d, I, srcRequest, entryB); c.Admitted() {
			c.Cancel()
			t.Fatal("a new request took the turn a is waiting for")
		} else if wait <= 0 {
			t.Fatalf("wait = %v", wait)
		}
		if w := a.Wire(ms(2000)); w != 0 {
			t.Fatalf("a.Wire at 2000 = %v", w)
		}
		a.Done()
		b.Done()
	})

	t.Run("smaller interval of the later request", func(t *testing.T) {
		// The wait uses the interval of the request that wants to go out.
		l, _ := newFake()
		a := mustAllow(t, l, ms(0), d, 3*I)
		if w := a.Wire(ms(100)); w != 0 {
			t.Fatalf("a.Wire = %v", w)
		}
		b := mustAllow(t, l, ms(1100), d, I)
		if w := b.Wire(ms(1100)); w != 0 {
			t.Fatalf("b.Wire = %v", w)
		}
		a.Done()
		b.Done()
	})

	t.Run("Wire after Done does nothing", func(t *testing.T) {
		l, _ := newFake()
		a := mustAllow(t, l, ms(0), d, I)
		a.Done()
		if w := a.Wire(ms(5000)); w != 0 {
			t.Fatalf("Wire after Done = %v", w)
		}
		if st := state(t, l, ms(5000), d); !st.LastRequestAt.Equal(ms(0)) {
			t.Fatalf("Wire after Done moved last_request_at to %v", st.LastRequestAt)
		}
	})
}

// TestReserveSlot: the slot is max(now, last+I); a reserved slot holds every later
// admission back, B and C included.
func TestReserveSlot(t *testing.T) {
	const d = "example.com"
	const I = time.Second
	s := at(past)

	l, _ := newFake()
	a, delay, ok := l.Reserve(s, d, I, srcLease, entryA, time.Time{})
	if !ok || delay != 0 || !a.Slot().Equal(s) {
		t.Fatalf("Reserve on a free domain = (%v, %v, slot %v)", ok, delay, a.Slot())
	}
	if ts := l.Stats(s).Trigger24hCount[entryA]; ts != 0 {
		t.Fatalf("an undelayed reservation counted as a trigger: %d", ts)
	}
	b, delay, ok := l.Reserve(s.Add(200*time.Millisecond), d, I, srcLease, entryA, time.Time{})
	if !ok || delay != 800*time.Millisecond || !b.Slot().Equal(s.Add(I)) {
		t.Fatalf("second Reserve = (%v, %v, slot %v), want slot at +1s", ok, delay, b.Slot())
	}
	c, delay, ok := l.Reserve(s.Add(300*time.Millisecond), d, 2*I, srcLease, entryA, time.Time{})
	if !ok || delay != 2700*time.Millisecond || !c.Slot().Equal(s.Add(3*I)) {
		t.Fatalf("third Reserve = (%v, %v, slot %v), want slot at +3s", ok, delay, c.Slot())
	}
	st := state(t, l, s, d)
	if st.InFlightCount != 3 || !st.LastRequestAt.Equal(s.Add(3*I)) {
		t.Fatalf("state = %+v", st)
	}
	// B and C cannot jump ahead of the reserved slots.
	mustRefuse(t, l, s.Add(3*I), d, I, I)
	mustRefuse(t, l, s.Add(4*I-1), d, I, 1)
	if ts := l.Stats(s).Trigger24hCount[entryA]; ts != 2 {
		t.Fatalf("delayed reservations counted %d triggers for A, want 2", ts)
	}
	if st := state(t, l, s.Add(4*I), d); st.State != downloader.RateStateOverLimitB {
		// the latest over-limit event was the refusal of B above
		t.Fatalf("state = %q", st.State)
	}
	for _, x := range []*Admission{&a, &b, &c} {
		x.Done()
	}
}

// TestReserveDeadline: a slot after the deadline reserves nothing and changes nothing but
// the over-limit count.
func TestReserveDeadline(t *testing.T) {
	const d = "example.com"
	const I = time.Second
	s := at(past)
	l, _ := newFake()
	a := mustAllow(t, l, s, d, I)
	before := state(t, l, s, d)

	tests := []struct {
		deadline time.Time
		wantOK   bool
	}{
		{s.Add(I - 1), false},
		{s.Add(500 * time.Millisecond), false},
		{s.Add(I), true}, // a slot exactly at the deadline is still in time
	}
	for i, tc := range tests {
		r, delay, ok := l.Reserve(s.Add(100*time.Millisecond), d, I, srcLease, entryA, tc.deadline)
		if ok != tc.wantOK || delay != 900*time.Millisecond || r.Admitted() != tc.wantOK {
			t.Fatalf("#%d: Reserve = (%v, %v, admitted %v), want ok=%v delay 900ms", i, ok, delay, r.Admitted(), tc.wantOK)
		}
		if !ok {
			st := state(t, l, s, d)
			if !st.LastRequestAt.Equal(before.LastRequestAt) || st.InFlightCount != before.InFlightCount {
				t.Fatalf("#%d: a refused reservation changed the state: %+v", i, st)
			}
			continue
		}
		r.Cancel()
	}
	if n := l.Stats(s).Trigger24hCount[entryA]; n != 3 {
		t.Fatalf("trigger count for A = %d, want 3 (every delayed or refused reservation)", n)
	}
	a.Done()
}

// TestReservationsInARow: several reservations for one domain go out at their own slots,
// in order; none waits for the ones reserved after it.
func TestReservationsInARow(t *testing.T) {
	const d = "example.com"
	const I = time.Second
	s := at(past)
	l, _ := newFake()
	var rs []Admission
	for i := range 5 {
		r, _, ok := l.Reserve(s, d, I, srcLease, entryA, time.Time{})
		if !ok || !r.Slot().Equal(s.Add(time.Duration(i)*I)) {
			t.Fatalf("#%d: slot %v", i, r.Slot())
		}
		rs = append(rs, r)
	}
	for i := range rs {
		slot := s.Add(time.Duration(i) * I)
		// Early: a reservation never goes out before its slot.
		if w := rs[i].Wire(slot.Add(-100 * time.Millisecond)); w != 100*time.Millisecond {
			t.Fatalf("#%d: Wire 100ms before the slot = %v, want 100ms", i, w)
		}
		// On time, with some jitter.
		if w := rs[i].Wire(slot.Add(time.Millisecond)); w != 0 {
			t.Fatalf("#%d: Wire at its slot = %v, want 0", i, w)
		}
		rs[i].Done()
	}
}

// TestReserveNotPushedByEarlierLateWire: a request admitted before a reservation that
// goes on the wire late pushes the reservation back by no more than needed.
func TestReserveNotPushedByEarlierLateWire(t *testing.T) {
	const d = "example.com"
	const I = time.Second
	s := at(past)
	l, _ := newFake()
	a := mustAllow(t, l, s, d, I)
	r, _, _ := l.Reserve(s.Add(10*time.Millisecond), d, I, srcLease, entryA, time.Time{})
	if !r.Slot().Equal(s.Add(I)) {
		t.Fatalf("slot = %v", r.Slot())
	}
	// a's handshake took 400 ms: it goes out at +400ms, so r must wait until +1400ms.
	if w := a.Wire(s.Add(400 * time.Millisecond)); w != 0 {
		t.Fatalf("a.Wire = %v", w)
	}
	if w := r.Wire(s.Add(I)); w != 400*time.Millisecond {
		t.Fatalf("r.Wire at its slot = %v, want 400ms", w)
	}
	if w := r.Wire(s.Add(1400 * time.Millisecond)); w != 0 {
		t.Fatalf("r.Wire at +1400ms = %v", w)
	}
	a.Done()
	r.Done()
}

// TestCancel: Cancel gives the slot back only if nothing happened to the domain since.
func TestCancel(t *testing.T) {
	const d = "example.com"
	const I = time.Second
	s := at(past)

	t.Run("restores", func(t *testing.T) {
		l, _ := newFake()
		a := mustAllow(t, l, s, d, I)
		a.Done()
		r, _, _ := l.Reserve(s.Add(100*time.Millisecond), d, I, srcLease, entryA, time.Time{})
		r.Cancel()
		st := state(t, l, s, d)
		if !st.LastRequestAt.Equal(s) || st.InFlightCount != 0 {
			t.Fatalf("after Cancel: %+v, want last_request_at back at %v", st, s)
		}
		b := mustAllow(t, l, s.Add(I), d, I)
		b.Done()
	})

	t.Run("restores in reverse order", func(t *testing.T) {
		l, _ := newFake()
		a := mustAllow(t, l, s, d, I)
		a.Done()
		r1, _, _ := l.Reserve(s, d, I, srcLease, entryA, time.Time{})
		r2, _, _ := l.Reserve(s, d, I, srcLease, entryA, time.Time{})
		r2.Cancel()
		r1.Cancel()
		if st := state(t, l, s, d); !st.LastRequestAt.Equal(s) {
			t.Fatalf("last_request_at = %v, want %v", st.LastRequestAt, s)
		}
	})

	t.Run("not after a later admission", func(t *testing.T) {
		l, _ := newFake()
		r, _, _ := l.Reserve(s, d, I, srcLease, entryA, time.Time{})
		r2, _, _ := l.Reserve(s, d, I, srcLease, entryA, time.Time{})
		r.Cancel() // r2 was reserved since: last_request_at stays at r2's slot
		st := state(t, l, s, d)
		if !st.LastRequestAt.Equal(s.Add(I)) || st.InFlightCount != 1 {
			t.Fatalf("after Cancel: %+v", st)
		}
		r2.Done()
	})

	t.Run("not after its own Wire", func(t *testing.T) {
		l, _ := newFake()
		a := mustAllow(t, l, s, d, I)
		if w := a.Wire(s.Add(50 * time.Millisecond)); w != 0 {
			t.Fatalf("Wire = %v", w)
		}
		a.Cancel() // it did go out: only completes
		st := state(t, l, s, d)
		if !st.LastRequestAt.Equal(s.Add(50*time.Millisecond)) || st.InFlightCount != 0 {
			t.Fatalf("after Cancel: %+v", st)
		}
	})

	t.Run("keeps another request's wire moment", func(t *testing.T) {
		// a admitted at 0, r reserved at 1000; a goes out at 400; r is cancelled:
		// last_request_at must stay at a's wire moment, not go back to 0.
		l, _ := newFake()
		a := mustAllow(t, l, s, d, I)
		r, _, _ := l.Reserve(s, d, I, srcLease, entryA, time.Time{})
		if w := a.Wire(s.Add(400 * time.Millisecond)); w != 0 {
			t.Fatalf("a.Wire = %v", w)
		}
		r.Cancel()
		mustRefuse(t, l, s.Add(I), d, I, 400*time.Millisecond)
		a.Done()
	})

	t.Run("not across a Reset", func(t *testing.T) {
		l, _ := newFake()
		r, _, _ := l.Reserve(s, d, I, srcLease, entryA, time.Time{})
		l.Reset(s.Add(500 * time.Millisecond))
		r.Cancel()
		mustRefuse(t, l, s.Add(I), d, I, 500*time.Millisecond)
	})

	t.Run("after Done does nothing", func(t *testing.T) {
		l, _ := newFake()
		a := mustAllow(t, l, s, d, I)
		a.Done()
		a.Cancel()
		if st := state(t, l, s, d); !st.LastRequestAt.Equal(s) || st.InFlightCount != 0 {
			t.Fatalf("state = %+v", st)
		}
	})
}

// TestWait: Wait blocks on the limiter's clock until the slot, honours ctx and gives the
// reservation back when ctx ends.
func TestWait(t *testing.T) {
	const d = "example.com"
	const I = time.Second

	t.Run("free domain returns at once", func(t *testing.T) {
		l, clk := newFake()
		clk.Set(at(past))
		a, err := l.Wait(context.Background(), d, I, srcRequest, entryA)
		if err != nil || !a.Admitted() || !a.Slot().Equal(at(past)) {
			t.Fatalf("Wait = (%v, %v)", a.Slot(), err)
		}
		a.Done()
	})

	t.Run("waits for the slot", func(t *testing.T) {
		l, clk := newFake()
		clk.Set(at(past))
		first := mustAllow(t, l, clk.Now(), d, I)
		first.Done()
		type result struct {
			a   Admission
			err error
		}
		done := make(chan result, 1)
		go func() {
			a, err := l.Wait(context.Background(), d, I, srcRequest, entryA)
			done <- result{a, err}
		}()
		clk.WaitTimers(1)
		clk.Advance(I - 1)
		select {
		case r := <-done:
			t.Fatalf("Wait returned before its slot: %v", r.err)
		default:
		}
		clk.Advance(1)
		r := recv(t, done)
		if r.err != nil || !r.a.Slot().Equal(at(past).Add(I)) {
			t.Fatalf("Wait = (slot %v, %v)", r.a.Slot(), r.err)
		}
		r.a.Done()
	})

	t.Run("cancel gives the reservation back", func(t *testing.T) {
		l, clk := newFake()
		clk.Set(at(past))
		first := mustAllow(t, l, clk.Now(), d, I)
		first.Done()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			a, err := l.Wait(ctx, d, I, srcRequest, entryA)
			if a.Admitted() {
				a.Done()
			}
			done <- err
		}()
		clk.WaitTimers(1)
		if st := state(t, l, clk.Now(), d); st.InFlightCount != 1 {
			t.Fatalf("in_flight_count while waiting = %d", st.InFlightCount)
		}
		cancel()
		if err := recv(t, done); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait error = %v, want context.Canceled", err)
		}
		st := state(t, l, clk.Now(), d)
		if !st.LastRequestAt.Equal(at(past)) || st.InFlightCount != 0 {
			t.Fatalf("after a cancelled Wait: %+v", st)
		}
		if n := clk.TimerCount(); n != 0 {
			t.Fatalf("%d timers left", n)
		}
		// The slot it gave back is free again.
		b := mustAllow(t, l, at(past).Add(I), d, I)
		b.Done()
	})

	t.Run("deadline before the slot fails at once", func(t *testing.T) {
		// The fake clock is the real now here so the ctx deadline means the same on both.
		clk := newRealStartFake()
		l := New(clk)
		clk.Advance(past)
		first := mustAllow(t, l, clk.Now(), d, time.Hour)
		first.Done()
		ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(time.Hour-time.Minute))
		defer cancel()
		a, err := l.Wait(ctx, d, time.Hour, srcRequest, entryA)
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || a.Admitted() {
			t.Fatalf("Wait = (%v, %v), want a deadline error at once", a.Admitted(), err)
		}
		if st := state(t, l, clk.Now(), d); st.InFlightCount != 0 || !st.LastRequestAt.Equal(first.Slot()) {
			t.Fatalf("state = %+v", st)
		}
	})

	t.Run("cancelled context with a free slot", func(t *testing.T) {
		l, clk := newFake()
		clk.Set(at(past))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		a, err := l.Wait(ctx, d, I, srcRequest, entryA)
		if !errors.Is(err, context.Canceled) || a.Admitted() {
			t.Fatalf("Wait = (%v, %v)", a.Admitted(), err)
		}
		if st := state(t, l, clk.Now(), d); st.InFlightCount != 0 {
			t.Fatalf("state = %+v", st)
		}
	})
}

// TestWaitWire: WaitWire sleeps on the limiter's clock for its turn on the wire.
func TestWaitWire(t *testing.T) {
	const d = "example.com"
	const I = time.Second
	l, clk := newFake()
	clk.Set(at(past))
	a := mustAllow(t, l, clk.Now(), d, I)
	clk.Advance(I)
	b := mustAllow(t, l, clk.Now(), d, I)
	if w := b.Wire(clk.Now()); w != 0 {
		t.Fatalf("b.Wire = %v", w)
	}
	clk.Advance(100 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- a.WaitWire(context.Background()) }()
	clk.WaitTimers(1)
	clk.Advance(900*time.Millisecond - 1)
	select {
	case err := <-done:
		t.Fatalf("WaitWire returned early: %v", err)
	default:
	}
	clk.Advance(1)
	if err := recv(t, done); err != nil {
		t.Fatalf("WaitWire = %v", err)
	}
	if st := state(t, l, clk.Now(), d); !st.LastRequestAt.Equal(at(past).Add(2 * I)) {
		t.Fatalf("last_request_at = %v", st.LastRequestAt)
	}
	a.Done()
	b.Done()

	// ctx ends while waiting: WaitWire returns its error and the request can be cancelled.
	c := mustAllow(t, l, clk.Now().Add(I), d, I)
	e := mustAllow(t, l, clk.Now().Add(2*I), d, I)
	clk.Advance(2 * I)
	if w := e.Wire(clk.Now()); w != 0 {
		t.Fatalf("e.Wire = %v", w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- c.WaitWire(ctx) }()
	clk.WaitTimers(1)
	cancel()
	if err := recv(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitWire = %v, want context.Canceled", err)
	}
	c.Cancel()
	e.Done()
	if st := state(t, l, clk.Now(), d); st.InFlightCount != 0 {
		t.Fatalf("in_flight_count = %d", st.InFlightCount)
	}
	var zero Admission
	if err := zero.WaitWire(context.Background()); err != nil {
		t.Fatalf("zero WaitWire = %v", err)
	}
}

// TestInFlightCount: up on admission, down on Done or Cancel, never below zero, Done
// idempotent; Stats sums it over every domain.
func TestInFlightCount(t *testing.T) {
	const I = time.Second
	s := at(past)
	l, _ := newFake()
	check := func(step, domain string, want int) {
		t.Helper()
		if st := state(t, l, s, domain); st.InFlightCount != want {
			t.Fatalf("%s: %s in_flight_count = %d, want %d", step, domain, st.InFlightCount, want)
		}
	}
	a := mustAllow(t, l, s, "a.example", I)
	check("admit", "a.example", 1)
	r, _, _ := l.Reserve(s, "a.example", I, srcLease, entryA, time.Time{})
	check("reserve", "a.example", 2)
	b := mustAllow(t, l, s, "b.example", I)
	if n := l.Stats(s).InFlightCount; n != 3 {
		t.Fatalf("Stats in_flight_count = %d, want 3", n)
	}
	a.Done()
	a.Done()
	a.Cancel()
	check("done twice", "a.example", 1)
	r.Cancel()
	r.Cancel()
	r.Done()
	check("cancel", "a.example", 0)
	b.Wire(s)
	b.Cancel() // after Wire: completes
	b.Done()
	check("wire+cancel", "b.example", 0)
	if n := l.Stats(s).InFlightCount; n != 0 {
		t.Fatalf("Stats in_flight_count = %d, want 0", n)
	}
	// A copy of a done admission does not decrement again below zero.
	c := mustAllow(t, l, s.Add(I), "c.example", I)
	cp := c
	c.Done()
	cp.Done()
	check("copy done", "c.example", 0)
	if n := l.Stats(s).InFlightCount; n != 0 {
		t.Fatalf("Stats in_flight_count = %d after a double Done through a copy, want 0", n)
	}
}

// TestReset: after a loss every domain, seen before or not, waits until reset+I; an entry
// with a request in flight survives.
func TestReset(t *testing.T) {
	const I = time.Second
	s := at(past)
	l, _ := newFake()
	old := mustAllow(t, l, s, "old.example", I)
	old.Done()
	busy := mustAllow(t, l, s, "busy.example", I)
	reset := s.Add(10 * time.Second)
	l.Reset(reset)

	if _, ok := l.Domain(reset, "old.example"); ok {
		t.Fatal("an idle entry survived Reset")
	}
	st := state(t, l, reset, "busy.example")
	if st.InFlightCount != 1 {
		t.Fatalf("busy entry after Reset: %+v", st)
	}
	for _, d := range []string{"old.example", "busy.example", "new.example"} {
		mustRefuse(t, l, reset, d, I, I)
		mustRefuse(t, l, reset.Add(I-1), d, I, 1)
	}
	// The request in flight still completes normally.
	if w := busy.Wire(reset.Add(100 * time.Millisecond)); w != 0 {
		t.Fatalf("Wire after Reset = %v", w)
	}
	busy.Done()
	if st := state(t, l, reset, "busy.example"); st.InFlightCount != 0 {
		t.Fatalf("in_flight_count = %d", st.InFlightCount)
	}
	for _, d := range []string{"old.example", "new.example"} {
		a := mustAllow(t, l, reset.Add(I), d, I)
		a.Done()
	}
	a := mustAllow(t, l, reset.Add(100*time.Millisecond+I), "busy.example", I)
	a.Done()

	// A Reset to an earlier instant never moves the loss back.
	l.Reset(s)
	mustRefuse(t, l, reset.Add(I-1), "other.example", I, 1)
}

// TestRestartIsConservative: a new limiter built at the moment of a restart refuses a
// domain that the old one had just let through, until one interval after the restart.
func TestRestartIsConservative(t *testing.T) {
	const I = 5 * time.Second
	clk := newRealStartFake()
	old := New(clk)
	clk.Advance(past)
	a := mustAllow(t, old, clk.Now(), "example.com", I)
	a.Done()
	clk.Advance(I) // the old limiter would admit now
	restarted := New(clk)
	mustRefuse(t, restarted, clk.Now(), "example.com", I, I)
	mustRefuse(t, restarted, clk.Now(), "never-seen.example", I, I)
	b := mustAllow(t, restarted, clk.Now().Add(I), "example.com", I)
	b.Done()
}

// TestSweep: entries that can no longer refuse anything and hold no statistic of the last
// 24 h are dropped; the rest stay; a dropped domain is never admitted early afterwards.
func TestSweep(t *testing.T) {
	const I = downloader.MaxMinInterval
	s := at(past)
	l, _ := newFake()
	idle := mustAllow(t, l, s, "idle.example", I)
	idle.Done()
	busy := mustAllow(t, l, s, "busy.example", I)
	refused := mustAllow(t, l, s, "refused.example", time.Second)
	refused.Done()

	// Within 24 h: nothing is dropped, they all carry statistics.
	if n := l.Sweep(s.Add(23 * time.Hour)); n != 0 {
		t.Fatalf("Sweep within 24 h dropped %d", n)
	}
	// A refusal 23 h in keeps the refused domain for 24 h more.
	mustRefuse(t, l, s.Add(23*time.Hour), "refused.example", 24*time.Hour, time.Hour)
	// An admission that happens late keeps its domain.
	late := mustAllow(t, l, s.Add(23*time.Hour), "late.example", time.Second)
	late.Done()

	now := s.Add(25 * time.Hour)
	if n := l.Sweep(now); n != 1 {
		t.Fatalf("Sweep after 25 h dropped %d, want 1 (idle.example)", n)
	}
	if _, ok := l.Domain(now, "idle.example"); ok {
		t.Fatal("idle.example survived")
	}
	for _, d := range []string{"busy.example", "refused.example", "late.example"} {
		if _, ok := l.Domain(now, d); !ok {
			t.Fatalf("%s was dropped", d)
		}
	}
	busy.Done()
	if n := l.Sweep(now); n != 1 {
		t.Fatalf("Sweep after Done dropped %d, want 1 (busy.example)", n)
	}
	if n := l.Sweep(s.Add(48 * time.Hour)); n != 2 {
		t.Fatalf("Sweep after 48 h dropped %d, want 2", n)
	}
	if n := l.Stats(s.Add(48 * time.Hour)).DomainCount; n != 0 {
		t.Fatalf("domain count = %d", n)
	}
}

// TestSweepNeverAdmitsEarly: a domain whose entry is dropped is judged again as if
// requested at the last loss, which is never later than its real last request allows.
func TestSweepNeverAdmitsEarly(t *testing.T) {
	const I = downloader.MaxMinInterval
	l, _ := newFake()
	s := at(past)
	// The limit case: an entry that went on the wire late, with the largest interval.
	a := mustAllow(t, l, s, "example.com", I)
	a.Wire(s.Add(time.Minute))
	a.Done()
	for h := 1; h <= 30; h++ {
		now := s.Add(time.Duration(h) * time.Hour)
		l.Sweep(now)
		if _, ok := l.Domain(now, "example.com"); !ok {
			// Gone: any interval up to the largest accepted one must have passed
			// since the last request it knew.
			if now.Before(s.Add(time.Minute + I)) {
				t.Fatalf("dropped at +%dh, before the largest interval passed", h)
			}
			b := mustAllow(t, l, now, "example.com", I)
			b.Done()
			return
		}
		if now.Before(s.Add(time.Minute + I)) {
			mustRefuse(t, l, now, "example.com", I, s.Add(time.Minute+I).Sub(now))
		}
	}
	t.Fatal("never dropped in 30 h")
}

// TestRunSweeps: Run sweeps every minute on the limiter's clock and stops with ctx.
func TestRunSweeps(t *testing.T) {
	l, clk := newFake()
	clk.Set(at(past))
	a := mustAllow(t, l, clk.Now(), "example.com", time.Second)
	a.Done()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	clk.WaitTimers(1)
	clk.Advance(25 * time.Hour) // fires the pending minute timer: one sweep at +25h
	clk.WaitTimers(1)           // Run is back to waiting, so the sweep is over
	if _, ok := l.Domain(clk.Now(), "example.com"); ok {
		t.Fatal("Run did not sweep")
	}
	cancel()
	if err := recv(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
}

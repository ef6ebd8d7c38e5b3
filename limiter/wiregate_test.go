package limiter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var errRefusedConn = errors.New("connection refused")

// gateStep is one step of a WireGate test: op on the gate, after advancing the clock.
type gateStep struct {
	advance time.Duration
	op      string // attempt, write (the forms that answer at once), connecting, connecting-ended (its dial over), send, sending (the waiting forms), wrote, failed, close
	wantErr error
}

// TestWireGate: one connection attempt and one first write per admission, nothing once
// the request is over, the write after an attempt moves the wire moment forward, and a
// failed attempt spaces the next request from its start.
func TestWireGate(t *testing.T) {
	const iv = 100 * time.Millisecond
	cases := []struct {
		name     string
		steps    []gateStep
		wantNext time.Duration // the next Allow's wait, right after the last step
		refused  int
	}{
		{"attempt then write: spaced from the write",
			[]gateStep{{0, "attempt", nil}, {50 * time.Millisecond, "write", nil}, {0, "wrote", nil}}, iv, 0},
		{"write on a reused connection", []gateStep{{0, "write", nil}, {0, "wrote", nil}}, iv, 0},
		{"failed attempt: spaced from its start",
			[]gateStep{{0, "attempt", nil}, {30 * time.Millisecond, "failed", nil}}, iv - 30*time.Millisecond, 0},
		{"second attempt refused", []gateStep{{0, "attempt", nil}, {0, "attempt", ErrWireUsed}, {0, "failed", nil}}, iv, 1},
		{"attempt after the write refused",
			[]gateStep{{0, "write", nil}, {0, "wrote", nil}, {0, "attempt", ErrWireUsed}, {0, "write", ErrWireUsed}}, iv, 2},
		{"nothing after close, and the slot is given back",
			[]gateStep{{0, "close", nil}, {0, "attempt", ErrWireOver}, {0, "write", ErrWireOver},
				{0, "connecting", ErrWireOver}, {0, "send", ErrWireOver}}, 0, 0},
		{"waiting forms: connecting then send",
			[]gateStep{{0, "connecting", nil}, {40 * time.Millisecond, "send", nil}, {0, "send", ErrWireUsed},
				{0, "connecting", ErrWireUsed}}, iv, 2},
		{"a dial that already ended: refused, its attempt used up, the slot given back",
			[]gateStep{{0, "connecting-ended", context.Canceled}, {0, "connecting", ErrWireUsed}}, 0, 1},
		{"waiting forms: a failed attempt", []gateStep{{0, "connecting", nil}, {20 * time.Millisecond, "failed", nil}},
			iv - 20*time.Millisecond, 0},
		{"a stream's headers on a shared connection: spaced from their write",
			[]gateStep{{0, "sending", nil}, {30 * time.Millisecond, "wrote", nil}, {0, "sending", ErrWireUsed},
				{0, "connecting", ErrWireUsed}}, iv, 2},
		{"a stream after its connection's attempt: moved forward to the headers",
			[]gateStep{{0, "connecting", nil}, {40 * time.Millisecond, "sending", nil}, {10 * time.Millisecond, "wrote", nil}}, iv, 0},
		{"a stream that never wrote its headers: held until the request is done",
			[]gateStep{{0, "sending", nil}, {25 * time.Millisecond, "close", nil}}, iv, 0},
		{"nothing after close: sending", []gateStep{{0, "close", nil}, {0, "sending", ErrWireOver}}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, clk := newFake()
			clk.Advance(past)
			adm := mustAllow(t, l, clk.Now(), "g.test", iv)
			g := NewWireGate(context.Background(), &adm)
			for i, s := range tc.steps {
				clk.Advance(s.advance)
				if err := runGateStep(g, s.op, clk.Now()); !errors.Is(err, s.wantErr) || (err == nil) != (s.wantErr == nil) {
					t.Fatalf("step %d (%s) = %v, want %v", i, s.op, err, s.wantErr)
				}
			}
			if refused, _ := g.Close(); refused != tc.refused {
				t.Errorf("refused = %d, want %d", refused, tc.refused)
			}
			adm.Cancel() // the caller's, once the gate is closed: Done if it went out
			next, wait := l.Allow(clk.Now(), "g.test", iv, srcRequest, entryB)
			next.Cancel()
			if wait != tc.wantNext {
				t.Errorf("next request's wait = %v, want %v", wait, tc.wantNext)
			}
		})
	}
}

// runGateStep runs op on g; a step form that would wait is an error.
func runGateStep(g *WireGate, op string, now time.Time) error {
	var d time.Duration
	var err error
	switch op {
	case "attempt":
		d, err = g.AttemptAt(now)
	case "write":
		d, err = g.WriteAt(now)
	case "connecting":
		err = g.Connecting(context.Background())
	case "connecting-ended":
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err = g.Connecting(ctx)
	case "send":
		_, err = g.Send(func() (int, error) { return 0, nil })
	case "sending":
		err = g.Sending()
	case "wrote":
		g.Wrote()
	case "failed":
		g.Connected(errRefusedConn)
	case "close":
		g.Close()
	default:
		panic(op)
	}
	if err == nil && d != 0 {
		return fmt.Errorf("would wait %v", d)
	}
	return err
}

// TestWireGateHoldsOthers: one admission's attempt holds the domain's other admissions
// until its write, and they are spaced from that write.
func TestWireGateHoldsOthers(t *testing.T) {
	const iv = 100 * time.Millisecond
	l, clk := newFake()
	clk.Advance(past)
	a := mustAllow(t, l, clk.Now(), "h.test", iv)
	ga := NewWireGate(context.Background(), &a)
	if d, err := ga.AttemptAt(clk.Now()); d != 0 || err != nil {
		t.Fatalf("a's attempt = %v, %v", d, err)
	}
	clk.Advance(iv + 200*time.Millisecond) // a slow handshake
	b := mustAllow(t, l, clk.Now(), "h.test", iv)
	gb := NewWireGate(context.Background(), &b)
	if d, err := gb.AttemptAt(clk.Now()); d != holdPoll || err != nil {
		t.Fatalf("b's attempt during a's handshake = %v, %v; want a poll of %v", d, err, holdPoll)
	}
	ga.Wrote() // before a's write: does nothing, a still holds
	if d, _ := gb.AttemptAt(clk.Now()); d != holdPoll {
		t.Fatalf("b's attempt after a's early Wrote = %v, want a poll of %v", d, holdPoll)
	}
	if !gb.AwaitsAttempt() {
		t.Fatal("b's attempt was refused, not deferred: it must still await its attempt")
	}
	clk.Advance(50 * time.Millisecond)
	if d, err := ga.WriteAt(clk.Now()); d != 0 || err != nil {
		t.Fatalf("a's write = %v, %v", d, err)
	}
	ga.Wrote()
	if d, _ := gb.AttemptAt(clk.Now()); d != iv {
		t.Errorf("b after a's write = %v, want an interval from the write", d)
	}
	ga.Close()
	gb.Close()
	a.Done()
	b.Cancel()
}

// gateModel is what a gate's answers must be, from the steps alone, with what the
// limiter knows of its admission.
type gateModel struct {
	g                            *WireGate
	adm                          *Admission
	attempted, held, wrote, over bool
	refused                      int
	// The limiter's side: the admission's sequence number, whether it went on the wire,
	// and who went out last before it was admitted (Cancel restores that).
	seq       int
	isWired   bool
	prevOut   *gateModel
	prevOutAt time.Time
}

// limiterModel is the domain's entry as far as the wire goes (limiter.go: admit, claimWire,
// Wrote, EndHold, Cancel, Done): who went out last and when, and whether it holds the
// domain. The simulation stays far under writeHoldMax, so a hold never runs out.
type limiterModel struct {
	out     *gateModel // nil: nobody since the loss
	outAt   time.Time
	holding bool
	seq     int
}

func (l *limiterModel) admit(m *gateModel, now time.Time) {
	l.seq++
	m.seq, m.prevOut, m.prevOutAt = l.seq, l.out, l.outAt
	if !l.holding { // admitted to go out at once
		l.out, l.outAt = m, now
	}
}

func (l *limiterModel) mayGo(m *gateModel, now time.Time, iv time.Duration) bool {
	return l.out == m || (!l.holding && !now.Before(l.outAt.Add(iv)))
}

func (l *limiterModel) goOut(m *gateModel, now time.Time) {
	if l.out != m || now.After(l.outAt) {
		l.outAt = now
	}
	l.out, l.holding, m.isWired = m, true, true
}

func (l *limiterModel) wrote(m *gateModel, now time.Time) {
	if m.isWired && l.out == m {
		l.holding = false
		if now.After(l.outAt) {
			l.outAt = now
		}
	}
}

func (l *limiterModel) endHold(m *gateModel) {
	if m.isWired && l.out == m {
		l.holding = false
	}
}

func (l *limiterModel) cancel(m *gateModel, now time.Time) {
	if !m.isWired && l.seq == m.seq {
		if l.out == m {
			l.out, l.outAt = m.prevOut, m.prevOutAt
		}
		l.seq = m.seq - 1
	}
	if l.holding && l.out == m { // done without Wrote: its write is over by now
		l.wrote(m, now)
	}
}

// TestWireGateProperty runs random steps of several gates of one domain, in both forms,
// and checks each answer against a model of the gate and of the limiter: a gate lets out
// at most one attempt and one write, nothing once closed, and nothing of one admission
// while another holds the domain or less than the interval after another went out.
func TestWireGateProperty(t *testing.T) { runSeeds(t, 300, 40, simulateGates) }

func simulateGates(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x9a7e))
	const iv = 100 * time.Millisecond
	const domain = "p.test"
	l, clk := newFake()
	clk.Advance(past)
	// The waiting forms run only when the model says they do not wait; should the model be
	// wrong, this bounds the wait (on the real clock) so that the test fails, not hangs.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var lm limiterModel
	var gates []*gateModel
	// 60 steps of at most 60 ms: far under writeHoldMax.
	for step := range 60 {
		clk.Advance(time.Duration(rng.IntN(7)) * 10 * time.Millisecond)
		now := clk.Now()
		if len(gates) == 0 || rng.IntN(6) == 0 {
			if a, wait := l.Allow(now, domain, iv, srcRequest, entryB); wait == 0 {
				m := &gateModel{adm: &a}
				m.g = NewWireGate(ctx, m.adm)
				lm.admit(m, now)
				gates = append(gates, m)
			}
			continue
		}
		m := gates[rng.IntN(len(gates))]
		isWaiting := rng.IntN(2) == 0 // the waiting form, when the model says it would not wait
		where := fmt.Sprintf("seed %d step %d", seed, step)
		switch op := rng.IntN(6); op {
		case 0, 1: // attempt, or write
			isWrite := op == 1
			var want error
			switch {
			case m.over:
				want = ErrWireOver
			case m.wrote || (!isWrite && m.attempted):
				want = ErrWireUsed
				m.refused++
			}
			goes := want == nil && lm.mayGo(m, now, iv)
			var d time.Duration
			var err error
			sent := false
			switch {
			case isWrite && isWaiting && (goes || want != nil):
				_, err = m.g.Send(func() (int, error) { sent = true; return 0, nil })
				if sent != goes {
					t.Fatalf("%s: Send wrote = %v, want %v", where, sent, goes)
				}
			case isWrite:
				d, err = m.g.WriteAt(now)
			case isWaiting && (goes || want != nil):
				err = m.g.Connecting(ctx)
			default:
				d, err = m.g.AttemptAt(now)
			}
			if err != want {
				t.Fatalf("%s: op %d = %v, want %v", where, op, err, want)
			}
			if want != nil {
				break
			}
			if (d == 0) != goes {
				t.Fatalf("%s: op %d waits %v, but the model says goes = %v", where, op, d, goes)
			}
			if !goes {
				break
			}
			lm.goOut(m, now)
			m.held = true
			if isWrite {
				m.wrote = true
			} else {
				m.attempted = true
			}
			if sent { // Send told Wrote after its write
				lm.wrote(m, now)
				m.held = false
			}
		case 2: // wrote
			m.g.Wrote()
			if m.wrote && !m.over {
				lm.wrote(m, now)
				m.held = false
			}
		case 3: // the attempt failed
			m.g.Connected(errRefusedConn)
			if m.held && !m.wrote && !m.over {
				lm.endHold(m)
				m.held = false
			}
		case 4, 5: // the request ends: the caller closes the gate and gives the admission back
			if m.over {
				break
			}
			if refused, _ := m.g.Close(); refused != m.refused {
				t.Fatalf("%s: refused = %d, want %d", where, refused, m.refused)
			}
			m.adm.Cancel()
			lm.cancel(m, now)
			m.over = true
		}
		if aw, want := m.g.AwaitsAttempt(), !m.attempted && !m.wrote && !m.over; aw != want {
			t.Fatalf("%s: AwaitsAttempt = %v, want %v", where, aw, want)
		}
		if aw, want := m.g.AwaitsWrite(), !m.wrote && !m.over; aw != want {
			t.Fatalf("%s: AwaitsWrite = %v, want %v", where, aw, want)
		}
	}
	for _, m := range gates {
		m.g.Close()
		m.adm.Cancel()
	}
}

// TestWireGateConcurrent: a transport's dials, writes and the request's end racing on one
// gate let out one attempt and one write at most, count every refusal, and write nothing
// once Close returned.
func TestWireGateConcurrent(t *testing.T) {
	const iv = 100 * time.Millisecond
	l, clk := newFake()
	clk.Advance(past)
	for round := range 200 {
		clk.Advance(iv)
		adm := mustAllow(t, l, clk.Now(), "r.test", iv)
		g := NewWireGate(context.Background(), &adm)
		var attempts, writes, used atomic.Int32
		var closed, lateWrite atomic.Bool
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Go(func() {
				if w%2 == 0 {
					switch err := g.Connecting(context.Background()); {
					case err == nil:
						attempts.Add(1)
						if w == 0 {
							g.Connected(errRefusedConn)
						}
					case errors.Is(err, ErrWireUsed):
						used.Add(1)
					}
				}
				_, err := g.Send(func() (int, error) {
					if closed.Load() {
						lateWrite.Store(true)
					}
					writes.Add(1)
					return 0, nil
				})
				if errors.Is(err, ErrWireUsed) {
					used.Add(1)
				}
			})
		}
		var refused int
		wg.Go(func() {
			refused, _ = g.Close()
			closed.Store(true)
		})
		wg.Wait()
		if n := attempts.Load(); n > 1 {
			t.Fatalf("round %d: %d attempts let out", round, n)
		}
		if n := writes.Load(); n > 1 {
			t.Fatalf("round %d: %d first writes let out", round, n)
		}
		if lateWrite.Load() {
			t.Fatalf("round %d: a write went out after Close returned", round)
		}
		if after, _ := g.Close(); after != int(used.Load()) || refused > after {
			t.Fatalf("round %d: refused %d (at Close %d), want %d", round, after, refused, used.Load())
		}
		adm.Cancel()
	}
}

// TestWireGateCloseEndsAWait: a step waiting for its admission's slot (a reservation whose
// slot is ahead) ends when the gate closes, without going out, whether its wait began
// before Close or Close came first; a step that may go out at once makes no wait.
func TestWireGateCloseEndsAWait(t *testing.T) {
	const iv = 100 * time.Millisecond
	for _, op := range []string{"connecting", "send", "sending"} {
		for _, closeFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/close first %t", op, closeFirst), func(t *testing.T) {
				l, clk := newFake()
				clk.Advance(past)
				first := mustAllow(t, l, clk.Now(), "w.test", iv)
				first.Wire(clk.Now())
				adm, delay, ok := l.Reserve(clk.Now(), "w.test", iv, srcRequest, entryA, time.Time{})
				if !ok || delay != iv {
					t.Fatalf("Reserve = %v, %v, want the slot an interval ahead", delay, ok)
				}
				g := NewWireGate(context.Background(), &adm)
				if closeFirst {
					g.Close()
				}
				done := make(chan error, 1)
				go func() {
					switch op {
					case "connecting":
						done <- g.Connecting(context.Background())
					case "send":
						_, err := g.Send(func() (int, error) { t.Error("written"); return 0, nil })
						done <- err
					case "sending":
						done <- g.Sending()
					}
				}()
				if !closeFirst {
					clk.WaitTimers(1) // waiting for the slot
					g.Close()
				}
				if err := <-done; err == nil {
					t.Fatalf("%s after Close = nil, want an error", op)
				}
				if g.waitCtx != nil && !closeFirst && g.waitCtx.Err() == nil {
					t.Error("the wait's context outlived Close")
				}
				adm.Cancel()
				first.Done()
			})
		}
	}
	l, clk := newFake()
	clk.Advance(past)
	adm := mustAllow(t, l, clk.Now(), "w.test", iv)
	g := NewWireGate(context.Background(), &adm)
	if err := g.Connecting(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Send(func() (int, error) { return 0, nil }); err != nil {
		t.Fatal(err)
	}
	if g.waitCtx != nil {
		t.Error("steps that went out at once made a wait's context")
	}
	g.Close()
	adm.Cancel()
}

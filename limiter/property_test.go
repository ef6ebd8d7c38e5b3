package limiter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"downloader"
)

// wireEvent is a moment a request went on the wire, with its interval.
type wireEvent struct {
	at       time.Time
	interval time.Duration
	who      string
}

// checkSpacing asserts the origin-side invariant: no two wire moments closer than the
// interval of the later request.
func checkSpacing(t *testing.T, wires []wireEvent) {
	t.Helper()
	slices.SortStableFunc(wires, func(a, b wireEvent) int { return a.at.Compare(b.at) })
	for i := 1; i < len(wires); i++ {
		gap := wires[i].at.Sub(wires[i-1].at)
		if gap < wires[i].interval {
			t.Fatalf("wire %d (%s at %v) only %v after wire %d (%s at %v); interval %v",
				i, wires[i].who, wires[i].at.Sub(t0), gap, i-1, wires[i-1].who, wires[i-1].at.Sub(t0), wires[i].interval)
		}
	}
}

// simActor is one request in the simulation.
type simActor struct {
	name     string
	a        Admission
	interval time.Duration
	reserved bool // came through Reserve
	slot     time.Time
	next     time.Time // when it acts next
	onWire   bool
	retries  int
}

// simReservation is a reserved slot, as long as it was not given back.
type simReservation struct {
	slot      time.Time
	cancelled bool
}

// TestWireSpacingProperty simulates random interleavings of Allow, Reserve, Wire, Done and
// Cancel on one domain with random handshake and response times and asserts that no two
// wire moments are closer than the interval, that no Allow admission ever comes before a
// reserved slot (plus its own interval), that in_flight_count matches the live requests,
// and that nobody waits for the wire for ever.
func TestWireSpacingProperty(t *testing.T) { runSeeds(t, 400, 50, simulate) }

// runSeeds runs sim once per seed as a subtest: seeds of them, or short under -short.
func runSeeds(t *testing.T, seeds, short int, sim func(t *testing.T, seed uint64)) {
	if testing.Short() {
		seeds = short
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { sim(t, uint64(seed)) })
	}
}

func simulate(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	const d = "example.com"
	base := []time.Duration{100 * time.Millisecond, time.Second}[rng.IntN(2)]
	mixed := rng.IntN(2) == 0
	intervalOf := func() time.Duration {
		if !mixed {
			return base
		}
		return []time.Duration{base / 2, base, 2 * base}[rng.IntN(3)]
	}
	dur := func(maxd time.Duration) time.Duration {
		switch rng.IntN(5) {
		case 0:
			return 0
		default:
			return time.Duration(rng.Int64N(int64(maxd) + 1))
		}
	}

	l, _ := newFake()
	now := at(past)
	nextArrival := now
	var (
		actors        []*simActor
		wires         []wireEvent
		reservations  []*simReservation
		arrivals      = 0
		maxArrivals   = 60 + rng.IntN(60)
		reservationOf = map[*simActor]*simReservation{}
	)
	for step := 0; ; step++ {
		if step > 100000 {
			t.Fatal("simulation did not finish")
		}
		// The next event: an arrival or an actor's turn.
		var who *simActor
		nextAt := time.Time{}
		if arrivals < maxArrivals {
			nextAt = nextArrival
		}
		for _, ac := range actors {
			if nextAt.IsZero() || ac.next.Before(nextAt) {
				nextAt, who = ac.next, ac
			}
		}
		if nextAt.IsZero() {
			break
		}
		if nextAt.Before(now) {
			t.Fatalf("time went back")
		}
		now = nextAt

		if who == nil {
			arrivals++
			nextArrival = now.Add(dur(2 * base))
			iv := intervalOf()
			name := fmt.Sprintf("r%d", arrivals)
			switch rng.IntN(3) {
			case 0, 1: // entry B or C
				e := []downloader.Entry{entryB, entryC}[rng.IntN(2)]
				a, wait := l.Allow(now, d, iv, srcRequest, e)
				if !a.Admitted() {
					if wait <= 0 {
						t.Fatalf("%s refused with wait %v", name, wait)
					}
					continue
				}
				for _, r := range reservations {
					if !r.cancelled && now.Before(r.slot.Add(iv)) {
						t.Fatalf("%s (Allow at %v, interval %v) jumped ahead of the slot reserved at %v",
							name, now.Sub(t0), iv, r.slot.Sub(t0))
					}
				}
				actors = append(actors, &simActor{name: name, a: a, interval: iv, slot: now, next: now.Add(dur(base + base/2))})
			case 2: // entry A
				var deadline time.Time
				if rng.IntN(2) == 0 {
					deadline = now.Add(dur(4 * base))
				}
				a, delay, ok := l.Reserve(now, d, iv, srcLease, entryA, deadline)
				if !ok {
					if a.Admitted() || deadline.IsZero() || !now.Add(delay).After(deadline) {
						t.Fatalf("%s: Reserve refused with delay %v, deadline %v", name, delay, deadline.Sub(now))
					}
					continue
				}
				if delay < 0 || !a.Slot().Equal(now.Add(delay)) {
					t.Fatalf("%s: slot %v, delay %v", name, a.Slot().Sub(now), delay)
				}
				if !deadline.IsZero() && a.Slot().After(deadline) {
					t.Fatalf("%s: slot after the deadline", name)
				}
				ac := &simActor{name: name, a: a, interval: iv, reserved: true, slot: a.Slot()}
				// Usually at the slot plus a handshake, sometimes too early.
				if rng.IntN(6) == 0 {
					ac.next = now.Add(time.Duration(rng.Int64N(int64(delay) + 1)))
				} else {
					ac.next = a.Slot().Add(dur(base))
				}
				r := &simReservation{slot: a.Slot()}
				reservations = append(reservations, r)
				reservationOf[ac] = r
				actors = append(actors, ac)
			}
			continue
		}

		// An actor's turn.
		remove := false
		switch {
		case !who.onWire && rng.IntN(20) == 0:
			who.a.Cancel()
			if r := reservationOf[who]; r != nil {
				r.cancelled = true
			}
			remove = true
		case !who.onWire:
			w := who.a.Wire(now)
			if w < 0 {
				t.Fatalf("%s: Wire = %v", who.name, w)
			}
			if w == 0 {
				if now.Before(who.slot) {
					t.Fatalf("%s went on the wire at %v, before its slot %v", who.name, now.Sub(t0), who.slot.Sub(t0))
				}
				wires = append(wires, wireEvent{now, who.interval, who.name})
				who.onWire = true
				who.next = now.Add(dur(2 * base))
				break
			}
			if who.retries++; who.retries > 50 {
				t.Fatalf("%s waited for the wire %d times", who.name, who.retries)
			}
			who.next = now.Add(w)
			if rng.IntN(4) == 0 {
				who.next = who.next.Add(dur(base / 10)) // a late timer
			}
		default:
			if rng.IntN(5) == 0 {
				who.a.Cancel()
			} else {
				who.a.Done()
			}
			remove = true
		}
		if remove {
			actors = slices.DeleteFunc(actors, func(x *simActor) bool { return x == who })
		}
		if st, ok := l.Domain(now, d); ok && st.InFlightCount != len(actors) {
			t.Fatalf("in_flight_count = %d, want %d live requests", st.InFlightCount, len(actors))
		}
	}
	if len(wires) < 5 {
		t.Fatalf("only %d requests went on the wire", len(wires))
	}
	checkSpacing(t, wires)
	if n := l.Stats(now).InFlightCount; n != 0 {
		t.Fatalf("in_flight_count at the end = %d", n)
	}
}

// TestWireSpacingConcurrent runs goroutines against one domain through the blocking API
// (Wait, WaitWire) and through Allow with retries, on a fake clock that moves only when
// every goroutine is blocked (a synctest bubble tells when), and checks the wire spacing
// under the race detector.
func TestWireSpacingConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			workers  = 6
			requests = 15
			I        = 100 * time.Millisecond
			d        = "example.com"
		)
		l, clk := newFake()
		clk.Set(at(past))
		var (
			mu     sync.Mutex
			wires  []wireEvent
			active atomic.Int64
			errs   = make(chan error, workers)
		)
		active.Store(workers)
		sleep := func(dur time.Duration) {
			tm := clk.NewTimer(dur)
			<-tm.C()
		}
		for w := range workers {
			go func() {
				defer active.Add(-1)
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for i := range requests {
					var a Admission
					if w%2 == 0 {
						var err error
						if a, err = l.Wait(context.Background(), d, I, srcLease, entryA); err != nil {
							errs <- err
							return
						}
					} else {
						for {
							var wait time.Duration
							if a, wait = l.Allow(clk.Now(), d, I, srcRequest, entryB); a.Admitted() {
								break
							}
							sleep(wait)
						}
					}
					sleep(time.Duration(rng.Int64N(int64(I)))) // the handshake
					if err := a.WaitWire(context.Background()); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					wires = append(wires, wireEvent{clk.Now(), I, fmt.Sprintf("w%d/%d", w, i)})
					mu.Unlock()
					sleep(time.Duration(rng.Int64N(int64(2 * I)))) // the response
					a.Done()
				}
			}()
		}
		// Move the clock only when every live goroutine is blocked (synctest.Wait): each waits
		// on the fake clock, directly or behind another that does.
		for {
			synctest.Wait()
			if active.Load() == 0 {
				break
			}
			if clk.TimerCount() == 0 {
				t.Fatalf("%d workers blocked with no timer on the clock", active.Load())
			}
			clk.Advance(time.Millisecond)
		}
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if len(wires) != workers*requests {
			t.Fatalf("%d wires, want %d", len(wires), workers*requests)
		}
		checkSpacing(t, wires)
		if st := state(t, l, clk.Now(), d); st.InFlightCount != 0 {
			t.Fatalf("in_flight_count = %d", st.InFlightCount)
		}
	})
}

// TestConcurrentDomains hammers many domains from many goroutines (run under -race): per
// domain no two admissions come closer than the interval, and the counts add up.
func TestConcurrentDomains(t *testing.T) {
	const (
		goroutines = 8
		perG       = 2000
		domains    = 50
	)
	l, _ := newFake()
	base := at(past)
	var (
		mu       sync.Mutex
		admitted [domains][]time.Time
		wg       sync.WaitGroup
	)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				d := i % domains
				// Every goroutine asks at the same logical instants, one interval apart:
				// per domain and instant at most one request may be admitted.
				now := base.Add(time.Duration(i/domains) * time.Second)
				a, _ := l.Allow(now, fmt.Sprintf("d%02d.example", d), time.Second, srcRequest, entryB)
				if a.Admitted() {
					mu.Lock()
					admitted[d] = append(admitted[d], now)
					mu.Unlock()
					a.Wire(now)
					a.Done()
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for d := range domains {
		ts := admitted[d]
		if len(ts) == 0 {
			t.Fatalf("domain %d: nothing admitted", d)
		}
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(ts); i++ {
			if ts[i].Sub(ts[i-1]) < time.Second {
				t.Fatalf("domain %d: admissions at %v and %v", d, ts[i-1].Sub(base), ts[i].Sub(base))
			}
		}
		total += len(ts)
	}
	st := l.Stats(base.Add(time.Hour))
	if st.Request24hCount != uint64(total) || st.InFlightCount != 0 || st.DomainCount != domains {
		t.Fatalf("Stats = %+v, want %d requests over %d domains", st, total, domains)
	}
	if want := uint64(goroutines*perG - total); st.Trigger24hCount[entryB] != want {
		t.Fatalf("triggers = %d, want %d", st.Trigger24hCount[entryB], want)
	}
}

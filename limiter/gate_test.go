package limiter

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The gate's tests run in a synctest bubble: synctest.Wait returns once every goroutine
// the test started is blocked on the gate (or has returned), so "queued" and "still
// waiting" are facts, not guesses, and the deadline in TestGateCancelWhileQueued passes
// on the bubble's clock.

// inBubble runs a subtest in its own bubble.
func inBubble(f func(t *testing.T)) func(t *testing.T) {
	return func(t *testing.T) { synctest.Test(t, f) }
}

// acquireAsync starts Acquire in a goroutine and returns the channel of its result.
func acquireAsync(ctx context.Context, g *Gate, mode QueueMode) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- g.Acquire(ctx, mode) }()
	return ch
}

// queue starts n Acquires one after another, each queued before the next starts, so their
// order in the queue is known. Call it inside a bubble.
func queue(t *testing.T, g *Gate, ctx context.Context, mode QueueMode, n int) []<-chan error {
	t.Helper()
	var chs []<-chan error
	for range n {
		want := g.Waiting() + 1
		chs = append(chs, acquireAsync(ctx, g, mode))
		synctest.Wait()
		if got := g.Waiting(); got != want {
			t.Fatalf("%d waiting once the Acquire blocked, want %d", got, want)
		}
	}
	return chs
}

// mustBlock fails the test if the Acquire behind ch has returned once every goroutine of
// the bubble is blocked. Call it inside a bubble.
func mustBlock(t *testing.T, what string, ch <-chan error) {
	t.Helper()
	synctest.Wait()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v), want it still waiting", what, err)
	default:
	}
}

func TestGateFastPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate(2, 1)
		if g.Capacity() != 2 || g.QueueLength() != 1 || g.InFlight() != 0 || g.Waiting() != 0 {
			t.Fatalf("new gate: cap %d queue %d in flight %d waiting %d", g.Capacity(), g.QueueLength(), g.InFlight(), g.Waiting())
		}
		if !g.TryAcquire() {
			t.Fatal("TryAcquire on an empty gate failed")
		}
		if err := g.Acquire(context.Background(), QueueBounded); err != nil {
			t.Fatalf("Acquire with room: %v", err)
		}
		if g.InFlight() != 2 {
			t.Fatalf("in flight = %d", g.InFlight())
		}
		if g.TryAcquire() {
			t.Fatal("TryAcquire over capacity succeeded")
		}
		g.Release()
		if !g.TryAcquire() {
			t.Fatal("TryAcquire after Release failed")
		}
		g.Release()
		g.Release()
		if g.InFlight() != 0 {
			t.Fatalf("in flight = %d", g.InFlight())
		}
		// An ended context with room still fails fast only when it would have to wait.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := g.Acquire(ctx, QueueBounded); err != nil {
			t.Fatalf("Acquire with room and an ended ctx: %v", err)
		}
		g.Release()
		g.TryAcquire()
		g.TryAcquire()
		if err := g.Acquire(ctx, QueueAlways); !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire full with an ended ctx = %v", err)
		}
		if g.Waiting() != 0 {
			t.Fatalf("waiting = %d", g.Waiting())
		}
		g.Release()
		g.Release()
	})
}

func TestGateQueueBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate(1, 2)
		g.TryAcquire()
		chs := queue(t, g, context.Background(), QueueBounded, 2)
		if err := recv(t, acquireAsync(context.Background(), g, QueueBounded)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("Acquire with a full queue = %v, want ErrQueueFull", err)
		}
		if g.Waiting() != 2 {
			t.Fatalf("waiting = %d", g.Waiting())
		}
		// TryAcquire never jumps the queue.
		g.Release()
		if err := recv(t, chs[0]); err != nil {
			t.Fatal(err)
		}
		if g.TryAcquire() {
			t.Fatal("TryAcquire took a slot while full")
		}
		g.Release()
		if err := recv(t, chs[1]); err != nil {
			t.Fatal(err)
		}
		g.Release()

		// A zero-length queue refuses at once.
		z := NewGate(1, 0)
		z.TryAcquire()
		if err := recv(t, acquireAsync(context.Background(), z, QueueBounded)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("zero queue: %v", err)
		}
		z.Release()
	})
}

func TestGateQueueAlways(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate(1, 1)
		g.TryAcquire()
		chs := queue(t, g, context.Background(), QueueBounded, 1)
		// The queue is full for B and C, but A waits however long the queue is.
		if err := recv(t, acquireAsync(context.Background(), g, QueueBounded)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("bounded: %v", err)
		}
		always := queue(t, g, context.Background(), QueueAlways, 3)
		if g.Waiting() != 4 {
			t.Fatalf("waiting = %d, want 4", g.Waiting())
		}
		for _, ch := range append(chs, always...) {
			mustBlock(t, "a queued Acquire", ch)
			g.Release()
			if err := recv(t, ch); err != nil {
				t.Fatal(err)
			}
		}
		g.Release()
		if g.InFlight() != 0 || g.Waiting() != 0 {
			t.Fatalf("in flight %d waiting %d", g.InFlight(), g.Waiting())
		}
	})
}

func TestGateFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate(1, 100)
		g.TryAcquire()
		chs := queue(t, g, context.Background(), QueueAlways, 8)
		for i, ch := range chs {
			for _, later := range chs[i+1:] {
				mustBlock(t, "a later waiter", later)
			}
			g.Release()
			if err := recv(t, ch); err != nil {
				t.Fatalf("waiter %d: %v", i, err)
			}
		}
		g.Release()
	})
}

func TestGateCancelWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate(1, 10)
		g.TryAcquire()
		ctx, cancel := context.WithCancel(context.Background())
		first := queue(t, g, context.Background(), QueueBounded, 1)[0]
		middle := queue(t, g, ctx, QueueBounded, 1)[0]
		last := queue(t, g, context.Background(), QueueBounded, 1)[0]
		cancel()
		if err := recv(t, middle); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter = %v", err)
		}
		if g.Waiting() != 2 || g.InFlight() != 1 {
			t.Fatalf("after cancel: waiting %d in flight %d", g.Waiting(), g.InFlight())
		}
		g.Release()
		if err := recv(t, first); err != nil {
			t.Fatal(err)
		}
		mustBlock(t, "the last waiter", last)
		g.Release()
		if err := recv(t, last); err != nil {
			t.Fatal(err)
		}
		g.Release()
		if g.InFlight() != 0 || g.Waiting() != 0 {
			t.Fatalf("in flight %d waiting %d", g.InFlight(), g.Waiting())
		}

		// A deadline works the same way.
		g.TryAcquire()
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer dcancel()
		if err := g.Acquire(dctx, QueueAlways); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("deadline = %v", err)
		}
		if g.Waiting() != 0 {
			t.Fatalf("waiting = %d", g.Waiting())
		}
		g.Release()
	})
}

// TestGateReleaseRacingAcquire: a slot released while an Acquire is on its way into the
// queue is not lost (the waiter would otherwise wait for a Release that already happened).
// Each round releases at one of three moments: at once (the Acquire mostly not started
// yet), after one yield (the Acquire mostly between its failed TryAcquire and its
// queueing: the race this test is for, a yield is how it is reached, not a wait), or once
// the Acquire is surely queued (the plain grant).
func TestGateReleaseRacingAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for i := range 3000 {
			g := NewGate(1, 1)
			g.TryAcquire()
			ch := acquireAsync(context.Background(), g, QueueBounded)
			switch i % 3 {
			case 1:
				runtime.Gosched()
			case 2:
				synctest.Wait()
				if g.Waiting() != 1 {
					t.Fatalf("#%d: %d waiting once the Acquire blocked, want 1", i, g.Waiting())
				}
			}
			g.Release()
			if err := recv(t, ch); err != nil {
				t.Fatalf("#%d: %v", i, err)
			}
			g.Release()
		}
	})
}

// TestGateCancelRacingGrant: when a waiter's ctx ends as its slot is granted, either it
// keeps the slot (nil) or gives it back (error): the slot is never lost.
func TestGateCancelRacingGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for i := range 300 {
			g := NewGate(1, 1)
			g.TryAcquire()
			ctx, cancel := context.WithCancel(context.Background())
			ch := queue(t, g, ctx, QueueBounded, 1)[0]
			if i%2 == 0 {
				cancel()
				g.Release()
			} else {
				g.Release()
				cancel()
			}
			err := recv(t, ch)
			switch {
			case err == nil:
				if g.InFlight() != 1 {
					t.Fatalf("#%d: granted but in flight = %d", i, g.InFlight())
				}
				g.Release()
			case errors.Is(err, context.Canceled):
				// A cancelled Acquire that was granted gives the slot back before it
				// returns: the check below needs no wait.
			default:
				t.Fatalf("#%d: %v", i, err)
			}
			if g.InFlight() != 0 || g.Waiting() != 0 || !g.TryAcquire() {
				t.Fatalf("#%d: slot lost: in flight %d waiting %d", i, g.InFlight(), g.Waiting())
			}
			g.Release()
		}
	})
}

func TestGateSetCapacity(t *testing.T) {
	t.Run("up lets waiters in at once", inBubble(func(t *testing.T) {
		g := NewGate(1, 10)
		g.TryAcquire()
		chs := queue(t, g, context.Background(), QueueBounded, 3)
		extra := queue(t, g, context.Background(), QueueAlways, 1)
		g.SetCapacity(3)
		for _, ch := range chs[:2] {
			if err := recv(t, ch); err != nil {
				t.Fatal(err)
			}
		}
		mustBlock(t, "the third waiter", chs[2])
		g.SetCapacity(5)
		for _, ch := range []<-chan error{chs[2], extra[0]} {
			if err := recv(t, ch); err != nil {
				t.Fatal(err)
			}
		}
		if g.InFlight() != 5 || g.Waiting() != 0 || g.Capacity() != 5 {
			t.Fatalf("in flight %d waiting %d cap %d", g.InFlight(), g.Waiting(), g.Capacity())
		}
		for range 5 {
			g.Release()
		}
	}))

	t.Run("down waits for in-flight to drop", inBubble(func(t *testing.T) {
		g := NewGate(4, 10)
		for range 4 {
			g.TryAcquire()
		}
		g.SetCapacity(2)
		if g.TryAcquire() {
			t.Fatal("TryAcquire over the lowered cap")
		}
		ch := queue(t, g, context.Background(), QueueAlways, 1)[0]
		g.Release() // 3 in flight
		mustBlock(t, "a waiter with 3 in flight and cap 2", ch)
		g.Release() // 2
		mustBlock(t, "a waiter with 2 in flight and cap 2", ch)
		g.Release() // 1: the waiter gets in
		if err := recv(t, ch); err != nil {
			t.Fatal(err)
		}
		if g.InFlight() != 2 {
			t.Fatalf("in flight = %d", g.InFlight())
		}
		if g.TryAcquire() {
			t.Fatal("TryAcquire at the cap")
		}
		g.Release()
		g.Release()
	}))

	t.Run("zero closes the gate", inBubble(func(t *testing.T) {
		g := NewGate(2, 10)
		g.SetCapacity(0)
		if g.TryAcquire() {
			t.Fatal("TryAcquire with cap 0")
		}
		ch := queue(t, g, context.Background(), QueueBounded, 1)[0]
		mustBlock(t, "a waiter with cap 0", ch)
		g.SetCapacity(1)
		if err := recv(t, ch); err != nil {
			t.Fatal(err)
		}
		g.Release()
	}))
}

// TestGateStress runs many goroutines through the gate while the capacity changes, under
// the race detector: requests in flight never exceed the capacity in force, every waiter
// gets through and no slot is lost.
func TestGateStress(t *testing.T) {
	const (
		workers = 16
		rounds  = 300
		maxCap  = 6
	)
	g := NewGate(3, 4)
	var (
		cur, peak atomic.Int64
		wg        sync.WaitGroup
		stop      = make(chan struct{})
		changer   sync.WaitGroup
		fulls     atomic.Int64
	)
	// The changer moves the capacity once per poke; workers poke after each Release, so the
	// changes interleave with the traffic without a goroutine spinning beside it.
	poke := make(chan struct{}, 1)
	changer.Add(1)
	go func() {
		defer changer.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			case <-poke:
			}
			g.SetCapacity(1 + rng.IntN(maxCap))
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mode := QueueMode(w % 2)
			for range rounds {
				ctx := context.Background()
				var cancel context.CancelFunc = func() {}
				if w%4 == 3 {
					ctx, cancel = context.WithCancel(ctx)
					go cancel() // some waits end early
				}
				err := g.Acquire(ctx, mode)
				cancel()
				if err != nil {
					if errors.Is(err, ErrQueueFull) || errors.Is(err, context.Canceled) {
						fulls.Add(1)
						continue
					}
					t.Error(err)
					return
				}
				n := cur.Add(1)
				if n > maxCap {
					t.Errorf("%d in flight, cap never above %d", n, maxCap)
				}
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				runtime.Gosched() // hold the slot across a yield, so that others contend
				cur.Add(-1)
				g.Release()
				select {
				case poke <- struct{}{}:
				default:
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	changer.Wait()
	if g.InFlight() != 0 || g.Waiting() != 0 {
		t.Fatalf("after the stress: in flight %d waiting %d", g.InFlight(), g.Waiting())
	}
	// With a fixed cap, the bound is exact.
	g.SetCapacity(2)
	cur.Store(0)
	var wg2 sync.WaitGroup
	for range workers {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			for range rounds {
				if err := g.Acquire(context.Background(), QueueAlways); err != nil {
					t.Error(err)
					return
				}
				if n := cur.Add(1); n > 2 {
					t.Errorf("%d in flight with cap 2", n)
				}
				runtime.Gosched() // hold the slot across a yield, so that others contend
				cur.Add(-1)
				g.Release()
			}
		}()
	}
	wg2.Wait()
	if g.InFlight() != 0 || g.Waiting() != 0 {
		t.Fatalf("in flight %d waiting %d", g.InFlight(), g.Waiting())
	}
	t.Logf("peak in flight %d, %d refused or cancelled", peak.Load(), fulls.Load())
}

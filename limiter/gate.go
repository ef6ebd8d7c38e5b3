package limiter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// ErrQueueFull is returned by Gate.Acquire in QueueBounded mode when every slot is taken
// and the local queue is full.
var ErrQueueFull = errors.New("limiter: global cap reached and local queue full")

// QueueMode says what Acquire does when every slot is taken.
type QueueMode int

const (
	// QueueBounded waits in the local queue if it has room, else fails with ErrQueueFull
	// (entries B and C).
	QueueBounded QueueMode = iota
	// QueueAlways waits however long the queue is (entry A: its tasks are already leased).
	QueueAlways
)

// Gate bounds the requests in flight across the whole service (max_concurrent_count),
// with a FIFO local wait queue in front of it. The capacity can be changed at any time and
// the change applies at once, to waiting requests too. Safe for concurrent use; create it
// with NewGate.
//
// The fast path (a free slot and nobody waiting) is one atomic compare-and-swap; the mutex
// is taken only to queue or to hand a slot to a waiter.
type Gate struct {
	capacity    atomic.Int64
	inFlight    atomic.Int64
	waiting     atomic.Int64 // len(queue), readable without the lock
	queueLength atomic.Int64

	mu    sync.Mutex
	queue []*waiter // guarded by mu
}

type waiter struct {
	ready   chan struct{}
	granted bool // guarded by Gate.mu
}

// NewGate returns a gate with capacity slots and a local queue of queueLength.
func NewGate(capacity, queueLength int) *Gate {
	g := &Gate{}
	g.capacity.Store(int64(capacity))
	g.queueLength.Store(int64(queueLength))
	return g
}

// Capacity returns max_concurrent_count.
func (g *Gate) Capacity() int { return int(g.capacity.Load()) }

// InFlight returns the slots taken.
func (g *Gate) InFlight() int { return int(g.inFlight.Load()) }

// Waiting returns the length of the local queue.
func (g *Gate) Waiting() int { return int(g.waiting.Load()) }

// QueueLength returns the local queue's bound.
func (g *Gate) QueueLength() int { return int(g.queueLength.Load()) }

// SetCapacity changes max_concurrent_count. Raising it lets waiting requests in at once;
// lowering it lets in-flight requests finish and admits no new one until under the cap.
func (g *Gate) SetCapacity(n int) {
	g.capacity.Store(int64(n))
	g.mu.Lock()
	g.grantLocked()
	g.mu.Unlock()
}

func (g *Gate) tryTake() bool {
	for {
		n := g.inFlight.Load()
		if n >= g.capacity.Load() {
			return false
		}
		if g.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// grantLocked hands free slots to waiters in FIFO order. Requires g.mu held.
func (g *Gate) grantLocked() {
	for len(g.queue) > 0 && g.tryTake() {
		w := g.queue[0]
		g.queue[0] = nil
		g.queue = g.queue[1:]
		g.waiting.Add(-1)
		w.granted = true
		close(w.ready)
	}
}

// TryAcquire takes a slot if one is free and nobody is queued.
func (g *Gate) TryAcquire() bool {
	return g.waiting.Load() == 0 && g.tryTake()
}

// Acquire takes a slot, waiting in the local queue according to mode, until ctx ends. On
// success the caller must call Release exactly once.
func (g *Gate) Acquire(ctx context.Context, mode QueueMode) error {
	if g.TryAcquire() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	if mode == QueueBounded && int64(len(g.queue)) >= g.queueLength.Load() {
		g.mu.Unlock()
		return ErrQueueFull
	}
	w := &waiter{ready: make(chan struct{})}
	g.queue = append(g.queue, w)
	g.waiting.Add(1)
	// A slot may have been released between TryAcquire and the queueing above.
	g.grantLocked()
	g.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		if w.granted {
			g.mu.Unlock()
			g.Release()
			return ctx.Err()
		}
		for i, x := range g.queue {
			if x == w {
				g.queue = append(g.queue[:i], g.queue[i+1:]...)
				g.waiting.Add(-1)
				break
			}
		}
		g.mu.Unlock()
		return ctx.Err()
	}
}

// Release gives a slot back and hands it to the first waiter, if any.
func (g *Gate) Release() {
	g.inFlight.Add(-1)
	if g.waiting.Load() > 0 {
		g.mu.Lock()
		g.grantLocked()
		g.mu.Unlock()
	}
}

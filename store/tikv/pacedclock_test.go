package tikv

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"downloader/clock"
)

// pacedClock is the one clock of a cluster test whose instances serve real traffic: PD's
// (refNow) and every instance's. It runs with the real clock, lagging it by an amount that
// only grows: it is held while a live instance's heartbeat is so late that the clock would
// reach the end of its lease. A starved machine runs heartbeats late, and an instance is
// then rightly fenced, but that is not what such a test is about. Its requests still go to
// a real origin that stamps their arrival on the real clock: since the lag never shrinks,
// no gap measured there is shorter than the same gap on this clock. (A fake clock moved
// in steps would break that: an instant read just before a step and one read just after
// are a step further apart on it than on the real clock.)
//
// The bound an instance sets, once it has a lease L (the expiry of its last committed
// heartbeat) and its heartbeat timer comes (or came) due at D, is max(L-3I, D), I the
// heartbeat interval. The clock always reaches D, so no timer waits for ever; and while
// the heartbeats commit, the clock stays below L: a heartbeat ends, and sets its next
// timer, at most 2I (Start's wait; Run's is I) before that timer comes due, at a moment
// when the clock is at most L-3I; so D <= L-I, and the clock is held there until the
// heartbeat commits a later lease (TTL > 3I). Only failed heartbeats can end a lease.
//
// Timers fire on a driver's tick, every millisecond: late by up to a tick (or as long as
// a starved machine delays the driver), never early.
type pacedClock struct {
	mu sync.Mutex
	// lag is how far this clock is behind the real one; it only grows.
	lag time.Duration
	// last is the latest time this clock told: it never goes back.
	last   time.Time
	timers []*pacedTimer
	// paced are the runtimes whose heartbeats bound the clock, by instance id.
	paced map[string]*pacedRuntime
	// heldFor is how long, in all, the clock was held for late heartbeats.
	heldFor time.Duration
}

var _ clock.Clock = (*pacedClock)(nil)

// newPacedClock starts a paced clock at the real time and its driver, stopped when t ends
// (after every cleanup registered later: the nodes close with the clock still moving).
func newPacedClock(t *testing.T) *pacedClock {
	p := &pacedClock{last: time.Now(), paced: map[string]*pacedRuntime{}}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		p.drive(stop)
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		t.Logf("paced clock: held back %v in all for late heartbeats", p.held())
	})
	return p
}

// Now is the real time less the lag, held at the paced runtimes' bound.
func (p *pacedClock) Now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nowLocked()
}

// nowLocked is Now. Requires p.mu held.
func (p *pacedClock) nowLocked() time.Time {
	wall := time.Now()
	now := wall.Add(-p.lag)
	if bound, ok := p.boundLocked(); ok && now.After(bound) {
		now = bound
	}
	if now.Before(p.last) {
		now = p.last // cannot happen: the bound is never below the clock
	}
	if lag := wall.Sub(now); lag > p.lag {
		p.heldFor += lag - p.lag
		p.lag = lag
	}
	p.last = now
	return now
}

// NewTimer returns a timer that fires once the clock has reached now+d.
func (p *pacedClock) NewTimer(d time.Duration) clock.Timer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.newTimerLocked(p.nowLocked().Add(d))
}

// newTimerLocked is a timer firing at at. Requires p.mu held.
func (p *pacedClock) newTimerLocked(at time.Time) *pacedTimer {
	t := &pacedTimer{p: p, at: at, c: make(chan time.Time, 1)}
	if now := p.last; !at.After(now) {
		t.c <- now
		return t
	}
	p.timers = append(p.timers, t)
	return t
}

// drive fires the timers that came due, every millisecond, until stop is closed.
func (p *pacedClock) drive(stop <-chan struct{}) {
	tick := time.NewTicker(time.Millisecond) // the timers' resolution, not a wait for a condition
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		now := p.nowLocked()
		p.timers = slices.DeleteFunc(p.timers, func(t *pacedTimer) bool {
			if t.at.After(now) {
				return false
			}
			t.c <- now
			return true
		})
		p.mu.Unlock()
	}
}

// boundLocked is how far the clock may go: the least bound of a paced runtime with a
// lease (pacedClock). Requires p.mu held.
func (p *pacedClock) boundLocked() (time.Time, bool) {
	var bound time.Time
	for _, r := range p.paced {
		if r.released || r.rt == nil {
			continue
		}
		lease := r.rt.standing.load().leaseUntil
		if lease.IsZero() {
			continue // not registered yet: nothing to keep
		}
		b := lease.Add(-3 * r.interval)
		if r.due.After(b) {
			b = r.due
		}
		if bound.IsZero() || b.Before(bound) {
			bound = b
		}
	}
	return bound, !bound.IsZero()
}

func (p *pacedClock) held() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.heldFor
}

// refNow is PD's clock for a runtime on this clock: the same clock.
func (p *pacedClock) refNow(context.Context) (time.Time, error) { return p.Now(), nil }

// pacedTimer is a timer of the paced clock.
type pacedTimer struct {
	p  *pacedClock
	at time.Time
	c  chan time.Time
}

func (t *pacedTimer) C() <-chan time.Time { return t.c }

func (t *pacedTimer) Stop() bool {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	n := len(t.p.timers)
	t.p.timers = slices.DeleteFunc(t.p.timers, func(x *pacedTimer) bool { return x == t })
	return len(t.p.timers) < n
}

// pacedRuntime is the clock of one instance's runtime: the paced clock, with its timers
// shorter than the lease taken as heartbeat timers (Run's loop, Start's waits; its
// sweep's timer is minutes long).
type pacedRuntime struct {
	p             *pacedClock
	interval, ttl time.Duration
	// rt is the runtime whose lease bounds the clock; nil until set. Guarded by p.mu.
	rt *Runtime
	// due is when the runtime's last heartbeat timer comes (or came) due; zero before its
	// first one. Guarded by p.mu.
	due time.Time
	// released: the instance is dead or stops, its heartbeats bound nothing. Guarded by p.mu.
	released bool
}

// runtime returns the clock of instance id's runtime, whose heartbeats (every interval,
// a lease of ttl) bound this clock once its runtime is set, until it is released.
func (p *pacedClock) runtime(id string, interval, ttl time.Duration) *pacedRuntime {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := &pacedRuntime{p: p, interval: interval, ttl: ttl}
	p.paced[id] = r
	return r
}

// setRuntime names the runtime whose lease this clock keeps.
func (r *pacedRuntime) setRuntime(rt *Runtime) {
	r.p.mu.Lock()
	r.rt = rt
	r.p.mu.Unlock()
}

func (r *pacedRuntime) Now() time.Time { return r.p.Now() }

func (r *pacedRuntime) NewTimer(d time.Duration) clock.Timer {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	at := r.p.nowLocked().Add(d)
	if d < r.ttl {
		r.due = at
	}
	return r.p.newTimerLocked(at)
}

// release stops the runtime's heartbeats from bounding the clock: its instance died or
// stops.
func (r *pacedRuntime) release() {
	r.p.mu.Lock()
	r.released = true
	r.p.mu.Unlock()
}

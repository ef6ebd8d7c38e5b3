package tikv

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"downloader/clock"
	"downloader/engine"
	"downloader/internal/testkit"
	"downloader/limiter"
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

// TestPacedClock checks the paced clock the cluster test relies on: held below an
// instance's lease while its heartbeat is late, never held before a heartbeat timer has
// come due, never faster than the real clock, and its timers never early.
func TestPacedClock(t *testing.T) {
	const interval, ttl = 100 * time.Millisecond, 2 * time.Second
	p := newPacedClock(t)
	rt, err := NewRuntime(nil, RuntimeConfig{Gate: limiter.NewGate(1, 1), Share: engine.EvenShare, Clock: p})
	if err != nil {
		t.Fatal(err)
	}
	rc := p.runtime("x", interval, ttl)
	rc.setRuntime(rt)
	// A lease 3I+20ms away, no heartbeat timer yet: the clock stops 20 ms on.
	start := p.Now()
	lease := start.Add(3*interval + 20*time.Millisecond)
	rt.standing.store(standing{leaseUntil: lease})
	bound := lease.Add(-3 * interval)
	testkit.WaitFor(t, clusterWait, "the clock held at the lease's bound", func() bool { return p.Now().Equal(bound) })
	if held := p.held(); held <= 0 {
		t.Errorf("held %v; want the time it stood still counted", held)
	}
	// A heartbeat timer due past the bound moves it there: the timer fires, on time.
	tm := rc.NewTimer(50 * time.Millisecond)
	limit := time.NewTimer(clusterWait) // a bound: a broken clock fails, never hangs
	defer limit.Stop()
	select {
	case at := <-tm.C():
		if want := bound.Add(50 * time.Millisecond); at.Before(want) {
			t.Errorf("heartbeat timer fired at %v, before it came due at %v", at, want)
		}
	case <-limit.C:
		t.Fatal("a heartbeat timer due past the lease's bound never fired: the clock deadlocked")
	}
	if now := p.Now(); now.After(bound.Add(50 * time.Millisecond)) {
		t.Errorf("clock %v past the heartbeat timer's due %v while the lease did not move", now.Sub(start), bound.Add(50*time.Millisecond).Sub(start))
	}
	// The heartbeat commits a later lease: the clock runs again, no faster than the real one.
	rt.standing.store(standing{leaseUntil: p.Now().Add(ttl)})
	wall0, clk0 := time.Now(), p.Now()
	tm = p.NewTimer(30 * time.Millisecond)
	select {
	case at := <-tm.C():
		if at.Sub(clk0) < 30*time.Millisecond {
			t.Errorf("timer fired %v after it was set, before its 30ms", at.Sub(clk0))
		}
	case <-limit.C:
		t.Fatal("a timer within the lease never fired")
	}
	if clk, wall := p.Now().Sub(clk0), time.Since(wall0); clk > wall {
		t.Errorf("the clock moved %v while the real one moved %v", clk, wall)
	}
	// Released, the instance bounds nothing.
	rt.standing.store(standing{leaseUntil: p.Now().Add(3*interval + time.Millisecond)})
	rc.release()
	past := p.Now().Add(10 * time.Millisecond)
	testkit.WaitFor(t, clusterWait, "the clock past a released instance's lease", func() bool { return p.Now().After(past) })
}

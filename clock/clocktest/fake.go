// Package clocktest holds the fake clock of the tests: test support only, never imported
// by the service, so the binary does not carry it.
package clocktest

import (
	"downloader/clock"
	"sort"
	"sync"
	"time"
)

// Fake is a clock that moves only when Advance or Set is called. Timers fire, in order of
// their deadline, when the clock reaches them. Safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// waiters are woken whenever a timer is created, so tests can wait for a goroutine to
	// block on the clock instead of sleeping.
	changed chan struct{}
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) NewTimer(d time.Duration) clock.Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		t.fired = true
	} else {
		f.timers = append(f.timers, t)
	}
	close(f.changed)
	f.changed = make(chan struct{})
	return t
}

// TimerCount returns the number of timers that have not fired or been stopped.
func (f *Fake) TimerCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Changed returns a channel closed the next time a timer is created.
func (f *Fake) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// WaitTimers blocks until at least n timers are pending. It is how a test knows that a
// goroutine has reached its wait.
func (f *Fake) WaitTimers(n int) {
	for {
		f.mu.Lock()
		if len(f.timers) >= n {
			f.mu.Unlock()
			return
		}
		ch := f.changed
		f.mu.Unlock()
		<-ch
	}
}

// Advance moves the clock forward by d, firing every timer that comes due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.set(f.now.Add(d))
	f.mu.Unlock()
}

// Set moves the clock to t (never backwards), firing every timer that comes due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.set(t)
	f.mu.Unlock()
}

// set requires f.mu held.
func (f *Fake) set(t time.Time) {
	if t.Before(f.now) {
		return
	}
	f.now = t
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	kept := f.timers[:0]
	for _, tm := range f.timers {
		if !tm.at.After(t) {
			tm.fired = true
			tm.c <- t
			continue
		}
		kept = append(kept, tm)
	}
	for i := len(kept); i < len(f.timers); i++ {
		f.timers[i] = nil
	}
	f.timers = kept
}

type fakeTimer struct {
	f     *Fake
	at    time.Time
	c     chan time.Time
	fired bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	if t.fired {
		return false
	}
	for i, tm := range t.f.timers {
		if tm == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			t.fired = true
			return true
		}
	}
	return false
}

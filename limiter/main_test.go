package limiter

import (
	"downloader/clock/clocktest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"downloader"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is where the fake clock starts in every test. The limiter counts its start as a loss
// of the table, so most tests work at t0 plus an hour or more (after any interval).
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newFake() (*Limiter, *clocktest.Fake) {
	clk := clocktest.NewFake(t0)
	return New(clk), clk
}

// at returns t0 + d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// past is an instant long after the loss at t0, so no interval up to MaxMinInterval holds
// any domain back.
const past = 2 * downloader.MaxMinInterval

const (
	entryA = downloader.EntryLease
	entryB = downloader.EntryRender
	entryC = downloader.EntryProbe

	srcLease   = downloader.IntervalSourceLease
	srcRequest = downloader.IntervalSourceRequest
	srcDefault = downloader.IntervalSourceDefault
)

// mustAllow admits a request or fails the test.
func mustAllow(t testing.TB, l *Limiter, now time.Time, domain string, interval time.Duration) Admission {
	t.Helper()
	a, wait := l.Allow(now, domain, interval, srcRequest, entryB)
	if !a.Admitted() || wait != 0 {
		t.Fatalf("Allow(%v, %s, %v) refused with wait %v, want admitted", now.Sub(t0), domain, interval, wait)
	}
	return a
}

// mustRefuse checks that a request is refused with exactly wantWait.
func mustRefuse(t testing.TB, l *Limiter, now time.Time, domain string, interval, wantWait time.Duration) {
	t.Helper()
	a, wait := l.Allow(now, domain, interval, srcRequest, entryB)
	if a.Admitted() {
		a.Cancel()
		t.Fatalf("Allow(%v, %s, %v) admitted, want refused with wait %v", now.Sub(t0), domain, interval, wantWait)
	}
	if wait != wantWait {
		t.Fatalf("Allow(%v, %s, %v) wait = %v, want %v", now.Sub(t0), domain, interval, wait, wantWait)
	}
}

// state returns the snapshot of domain or fails the test.
func state(t testing.TB, l *Limiter, now time.Time, domain string) downloader.DomainState {
	t.Helper()
	st, ok := l.Domain(now, domain)
	if !ok {
		t.Fatalf("Domain(%s): not tracked", domain)
	}
	return st
}

// newRealStartFake returns a fake clock starting at the real now, for tests whose context
// deadlines must mean the same instant on both clocks.
func newRealStartFake() *clocktest.Fake { return clocktest.NewFake(time.Now()) }

// recv returns the next value from ch, failing the test if none comes within 10 s (so a
// broken limiter fails instead of hanging the run).
func recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	tm := time.NewTimer(10 * time.Second)
	defer tm.Stop()
	select {
	case v := <-ch:
		return v
	case <-tm.C:
		t.Fatal("timed out waiting for a result")
		panic("unreachable")
	}
}

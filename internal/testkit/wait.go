package testkit

import (
	"testing"
	"time"
)

// pollEvery is how often Eventually checks its condition.
const pollEvery = 10 * time.Millisecond

// Eventually checks cond every 10 ms until it holds (true) or limit has passed (false).
// It is the tests' one poll, for a condition nothing notifies of: another process's
// state, or a count other goroutines change. Where the code under test can tell (a
// channel, the fake clock's timers), a test waits on that instead.
func Eventually(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// WaitFor is Eventually that fails the test, naming what it waited for, when limit passes.
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Eventually(limit, cond) {
		t.Fatalf("after %v: still waiting for %s", limit, what)
	}
}

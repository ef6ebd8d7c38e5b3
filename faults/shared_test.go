package faults

import "sync"

// shared holds what several tests use and TestMain closes at the end (the browser pool).
var (
	sharedMu    sync.Mutex
	sharedClose []func()
)

// atExit registers f to run when the suite ends, before the leftovers check.
func atExit(f func()) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	sharedClose = append(sharedClose, f)
}

func closeShared() {
	sharedMu.Lock()
	fs := sharedClose
	sharedClose = nil
	sharedMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

package testkit

import (
	"bytes"
	"strings"
	"sync"
	"time"
)

// NotifyBuffer is a buffer that wakes its waiters at each write: a child process's stderr,
// which os/exec copies from the pipe on a goroutine of its own, so a line the child wrote
// before it said something else on stdout may not be here yet; a test waits for it with
// WaitFor rather than polling. Safe for concurrent use; the zero value is an empty buffer.
type NotifyBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed and dropped at each write; nil: nobody waits
}

// Write appends p and wakes the waiters.
func (b *NotifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written != nil {
		close(b.written)
		b.written = nil
	}
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *NotifyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// WaitFor reports whether the buffer holds want before deadline fires, checking again at
// each write.
func (b *NotifyBuffer) WaitFor(want string, deadline <-chan time.Time) bool {
	for {
		b.mu.Lock()
		if strings.Contains(b.b.String(), want) {
			b.mu.Unlock()
			return true
		}
		if b.written == nil {
			b.written = make(chan struct{})
		}
		ch := b.written
		b.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// WaitWithin is WaitFor with a deadline d from now.
func (b *NotifyBuffer) WaitWithin(want string, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	return b.WaitFor(want, deadline.C)
}

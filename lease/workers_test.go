package lease

import (
	"testing"
	"testing/synctest"
)

// TestWorkers: a job given while every worker is busy gets a worker of its own (a held
// task waiting for its slot never delays another), and a job given once a worker waits
// goes to that worker instead of a new goroutine.
func TestWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkers()
		first := make(chan struct{})
		ran := make(chan int, 3)
		w.run(func() { <-first; ran <- 1 })
		w.run(func() { ran <- 2 }) // the first worker is busy: a second one runs it
		if got := <-ran; got != 2 {
			t.Fatalf("job %d ran first, want 2 (a busy worker held it back)", got)
		}
		close(first)
		<-ran
		synctest.Wait() // both workers wait for a job
		w.run(func() { ran <- 3 })
		<-ran
		if w.count != 2 {
			t.Errorf("workers started = %d, want 2 (the third job reuses a waiting worker)", w.count)
		}
		w.stop()
	})
}

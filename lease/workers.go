package lease

import "sync"

// workers runs the loop's held tasks on long-lived goroutines: a task goes to a worker
// waiting for one when there is such a worker, else to a new worker. A worker keeps the
// stack its tasks grew (net/http, the store, the page codec: tens of KiB) for the next
// task, where a goroutine per task grew a fresh stack from its first few KiB every time;
// copying those stacks was the lease path's largest cost of its own (docs/decisions.md).
// Workers never outnumber the tasks held at once (MaxHeldCount's peak), since one starts
// only when every other is busy; they end when the loop stops (stop).
type workers struct {
	jobs  chan func() // unbuffered: a send succeeds only to a worker waiting for a task
	wg    sync.WaitGroup
	count int // workers started; run's caller alone touches it
}

func newWorkers() *workers { return &workers{jobs: make(chan func())} }

// run runs job on a waiting worker, or on a new one when none waits.
func (w *workers) run(job func()) {
	select {
	case w.jobs <- job:
	default:
		w.count++
		w.wg.Add(1)
		go w.work(job)
	}
}

func (w *workers) work(job func()) {
	defer w.wg.Done()
	job()
	for job := range w.jobs {
		job()
	}
}

// stop ends the workers once every job given to run has returned, and waits for them.
// run must not be called after stop.
func (w *workers) stop() {
	close(w.jobs)
	w.wg.Wait()
}

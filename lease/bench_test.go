package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
)

// BenchmarkLoopPerTask is what the lease loop itself costs per task: a source that hands
// out tasks at once, a runner that reports at once and a committer that keeps nothing, so
// that everything measured is the loop's (lease calls, the worker hand-off, the held
// count, the commit call), at the service's 4 held tasks per slot of 64.
//
//	go test -run '^$' -bench LoopPerTask -benchmem ./lease/
func BenchmarkLoopPerTask(b *testing.B) {
	src := &limitedSource{}
	done := &countingCommitter{all: make(chan struct{})}
	l, err := New(Config{Source: src, Runner: instantRunner{}, Outbox: nopStore{}, Committer: done,
		MaxHeldCount: func() int { return 4 * 64 }})
	if err != nil {
		b.Fatal(err)
	}
	src.left.Store(int64(b.N))
	done.want.Store(int64(b.N))
	ctx, cancel := context.WithCancel(context.Background())
	b.ReportAllocs()
	b.ResetTimer()
	ran := make(chan error, 1)
	go func() { ran <- l.Run(ctx) }()
	<-done.all
	b.StopTimer()
	cancel()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(src.calls.Load())/float64(b.N), "lease_calls/op")
}

// limitedSource hands out up to left tasks, as many as asked, then none.
type limitedSource struct {
	mu          sync.Mutex
	left, calls atomic.Int64
	next        int
}

func (s *limitedSource) Lease(_ context.Context, _ string, n int) ([]downloader.Task, error) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	n = min(n, int(s.left.Load()))
	s.left.Add(-int64(n))
	out := make([]downloader.Task, n)
	for i := range out {
		s.next++
		out[i] = downloader.Task{TaskID: fmt.Sprint(s.next)}
	}
	return out, nil
}

func (*limitedSource) Report(context.Context, *downloader.Report) error     { return nil }
func (*limitedSource) Release(context.Context, string, time.Duration) error { return nil }

type instantRunner struct{}

func (instantRunner) RunTask(_ context.Context, t *downloader.Task) downloader.LeaseReply {
	return downloader.LeaseReply{Report: &downloader.Report{TaskID: t.TaskID}}
}

// countingCommitter closes all once want task ends were committed.
type countingCommitter struct {
	want atomic.Int64
	n    atomic.Int64
	all  chan struct{}
}

func (c *countingCommitter) CommitTask(context.Context, *downloader.TaskEnd) error {
	if c.n.Add(1) == c.want.Load() {
		close(c.all)
	}
	return nil
}

package lease

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"downloader"
)

func TestLeaseBatchCount(t *testing.T) {
	tests := []struct {
		maxHeld, maxLease, want int
	}{
		{0, 100, 1},    // no capacity: still one, never zero
		{1, 100, 1},    // a loop that holds one task leases as soon as it is free
		{8, 100, 1},    // small loops lease per finished task, as before
		{64, 100, 4},   // the default
		{256, 100, 16}, // the service's 4 per slot at 64 slots
		{4000, 100, 100},
		{4000, 10, 10}, // never more than one lease call takes
	}
	for _, tt := range tests {
		if got := leaseBatchCount(tt.maxHeld, tt.maxLease); got != tt.want {
			t.Errorf("leaseBatchCount(%d, %d) = %d, want %d", tt.maxHeld, tt.maxLease, got, tt.want)
		}
	}
}

// batchSource hands out endless tasks and records each lease call's maxTaskCount.
type batchSource struct {
	mu    sync.Mutex
	asked []int
	next  int
}

func (s *batchSource) Lease(_ context.Context, _ string, n int) ([]downloader.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, n)
	out := make([]downloader.Task, n)
	for i := range out {
		s.next++
		out[i] = downloader.Task{TaskID: fmt.Sprintf("t%d", s.next)}
	}
	return out, nil
}

func (s *batchSource) calls() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.asked...)
}

func (*batchSource) Report(context.Context, *downloader.Report) error     { return nil }
func (*batchSource) Release(context.Context, string, time.Duration) error { return nil }

// gatedRunner finishes a task each time the test sends on finish, and every task once
// finish is closed.
type gatedRunner struct{ finish chan struct{} }

func (r gatedRunner) RunTask(_ context.Context, t *downloader.Task) downloader.LeaseReply {
	<-r.finish
	return downloader.LeaseReply{Report: &downloader.Report{TaskID: t.TaskID}}
}

type nopStore struct{}

func (nopStore) CommitTask(context.Context, *downloader.TaskEnd) error { return nil }
func (nopStore) PendingReports(context.Context, string, int) ([]downloader.Report, error) {
	return nil, nil
}
func (nopStore) DeleteReport(context.Context, *downloader.Report) (bool, error) { return true, nil }

// TestLeaseWaitsForABatch: once the loop holds all it may, it leases again only when a
// batch's worth of capacity is free (leaseBatchCount: 2 of 32), in one call for that batch,
// not one call per finished task; and a loop that holds few tasks leases as each finishes.
func TestLeaseWaitsForABatch(t *testing.T) {
	tests := []struct {
		maxHeld int
		// finished is how many tasks finish one by one; want the lease calls after each.
		want [][]int
	}{
		{32, [][]int{{32}, {32}, {32, 2}, {32, 2}, {32, 2, 2}}},
		{4, [][]int{{4}, {4, 1}, {4, 1, 1}, {4, 1, 1, 1}}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.maxHeld), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src := &batchSource{}
				run := gatedRunner{finish: make(chan struct{})}
				l, err := New(Config{Source: src, Runner: run, Outbox: nopStore{}, Committer: nopStore{},
					MaxHeldCount: func() int { return tt.maxHeld }})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- l.Run(ctx) }()
				for i, want := range tt.want {
					if i > 0 {
						run.finish <- struct{}{}
					}
					synctest.Wait()
					if got := src.calls(); fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("after %d finished: lease calls asked for %v, want %v", i, got, want)
						break
					}
					// Never more than a batch's worth of places empty.
					if held, low := l.Stats().HeldCount, tt.maxHeld-leaseBatchCount(tt.maxHeld, DefaultMaxLeaseCount); held <= low {
						t.Errorf("after %d finished: held %d, want more than %d", i, held, low)
					}
				}
				cancel()
				close(run.finish)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

package lease_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
	"downloader/lease"
)

// listingOutbox is the rig's outbox (telling the notifier of every write) counting the
// sender's reads of it.
type listingOutbox struct {
	notifyingOutbox
	listCount atomic.Int64
}

func (o *listingOutbox) PendingReports(ctx context.Context, after string, limit int) ([]downloader.Report, error) {
	o.listCount.Add(1)
	return o.notifyingOutbox.PendingReports(ctx, after, limit)
}

// TestFreshReportsAreNotReadBack: a report just made durable goes to the source from
// memory, not read back from the outbox, and is deleted from it once acknowledged; while
// the source is down the sender falls back to the outbox, and every report still gets
// through once it is back.
func TestFreshReportsAreNotReadBack(t *testing.T) {
	r := newRig(t, rigOptions{})
	s := newFakeScheduler(t, r.changes)
	ob := &listingOutbox{notifyingOutbox: notifyingOutbox{r.outbox, r.changes}}
	l, err := lease.New(lease.Config{Source: s.client(t), Runner: r.eng, Outbox: ob, Logger: slog.New(slog.DiscardHandler),
		PollMax: 20 * time.Millisecond, RetryMin: 5 * time.Millisecond, RetryMax: 40 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	const n = 20
	for i := range n {
		s.add(task(fmt.Sprintf("a-%d", i), hostURL(fmt.Sprintf("a%d.test", i), 0), 0))
	}
	waitFor(t, r.changes, "the first reports", func() bool { return len(s.reportedIDs()) == n })
	waitFor(t, r.changes, "an empty outbox", func() bool {
		c, err := r.outbox.ReportCount(context.Background())
		return err == nil && c == 0
	})
	if c := ob.listCount.Load(); c != 1 {
		t.Errorf("the outbox was listed %d times for %d fresh reports, want once (at the start)", c, n)
	}

	s.setReportsDown(true)
	for i := range n {
		s.add(task(fmt.Sprintf("b-%d", i), hostURL(fmt.Sprintf("b%d.test", i), 0), 0))
	}
	waitFor(t, r.changes, "a refused send and the reports waiting in the outbox", func() bool {
		_, _, calls := s.snapshot()
		c, err := r.outbox.ReportCount(context.Background())
		return calls > n && err == nil && c == n
	})
	s.setReportsDown(false)
	waitFor(t, r.changes, "every report", func() bool { return len(s.reportedIDs()) == 2*n })
	if c := ob.listCount.Load(); c < 2 {
		_, _, calls := s.snapshot()
		t.Errorf("the outbox was listed %d times (%d report calls): the sender did not fall back to it after failed sends", c, calls)
	}
}

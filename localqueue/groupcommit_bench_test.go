package localqueue

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/store/embedded"
)

// groupCommitter is the experiment behind keeping Pebble's own group commit (see
// docs/decisions.md): task ends batched by us, many tasks' writes in one Pebble batch
// under one hold of the queue's lock, one commit and one fsync per group. The first
// task to arrive leads: it commits what waits, group after group, while the others
// wait for their group's commit. Not used by the queue: BenchmarkTaskEndGrouped compares
// it with CommitTask.
type groupCommitter struct {
	q         *Queue
	mu        sync.Mutex
	pending   []*groupItem
	isLeading bool
	groups    atomic.Int64
}

type groupItem struct {
	end  *downloader.TaskEnd
	b    *pebble.Batch
	done func(error)
	err  error
	ch   chan struct{}
}

func (g *groupCommitter) commit(ctx context.Context, end *downloader.TaskEnd) error {
	q := g.q
	release, err := q.ks.Acquire(ctx, "group commit")
	if err != nil {
		return err
	}
	defer release()
	b := q.ks.NewBatch()
	defer b.Close()
	done, err := q.ks.StageTaskEnd(ctx, b, end)
	if err != nil {
		return err
	}
	it := &groupItem{end: end, b: b, done: done, ch: make(chan struct{})}
	g.mu.Lock()
	g.pending = append(g.pending, it)
	if g.isLeading {
		g.mu.Unlock()
		<-it.ch
		return it.err
	}
	g.isLeading = true
	for len(g.pending) > 0 {
		group := g.pending
		g.pending = nil
		g.mu.Unlock()
		g.run(group)
		g.mu.Lock()
	}
	g.isLeading = false
	g.mu.Unlock()
	<-it.ch
	return it.err
}

func (g *groupCommitter) run(group []*groupItem) {
	q := g.q
	g.groups.Add(1)
	gb := q.ks.NewBatch()
	defer gb.Close()
	var err error
	for _, it := range group {
		if err == nil {
			err = gb.Apply(it.b, nil)
		}
	}
	var applies []func()
	q.mu.Lock()
	for _, it := range group {
		if err != nil {
			break
		}
		apply, next, rerr := q.reportLocked(gb, it.end.Report)
		if rerr != nil {
			it.err = rerr
			continue
		}
		if apply != nil {
			q.counts = next
			applies = append(applies, apply)
		}
	}
	if err == nil {
		err = q.ks.ApplyNoSyncWait(gb, pebble.Sync)
	}
	if err == nil {
		for _, a := range applies {
			a()
		}
	}
	q.mu.Unlock()
	if err == nil {
		err = gb.SyncWait()
	}
	for _, it := range group {
		if err != nil {
			it.err = err
		}
		it.done(err)
		close(it.ch)
	}
}

// BenchmarkTaskEndGrouped is BenchmarkTaskEnd's committer path (path=pebble: CommitTask,
// Pebble's commit pipeline grouping the fsyncs) beside groupCommitter (path=grouped).
func BenchmarkTaskEndGrouped(b *testing.B) {
	for _, path := range []string{"pebble", "grouped"} {
		b.Run("path="+path, func(b *testing.B) {
			var g *groupCommitter
			benchTaskEnds(b, func(_ *embedded.Store, q *Queue) taskCommit {
				if path == "pebble" {
					return q.CommitTask
				}
				g = &groupCommitter{q: q}
				return g.commit
			})
			if g != nil {
				b.ReportMetric(float64(b.N)/float64(max(1, g.groups.Load())), "tasks/group")
			}
		})
	}
}

package localqueue

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
			s, err := embedded.Open(b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			q, err := Open(ctx, s, Config{})
			if err != nil {
				b.Fatal(err)
			}
			g := &groupCommitter{q: q}
			zero := int64(0)
			for lo := 0; lo < b.N; lo += MaxSubmitCount {
				var ts []downloader.Task
				for i := lo; i < min(b.N, lo+MaxSubmitCount); i++ {
					ts = append(ts, downloader.Task{URL: fmt.Sprintf("http://d%d.test/%d", i%1000, i), MinIntervalMs: &zero})
				}
				if _, err := q.Submit(ctx, ts); err != nil {
					b.Fatal(err)
				}
			}
			var tasks []downloader.Task
			for len(tasks) < b.N {
				got, err := q.Lease(ctx, "bench", 1000)
				if err != nil || len(got) == 0 {
					b.Fatalf("lease: %d, %v", len(got), err)
				}
				tasks = append(tasks, got...)
			}
			body := bytes.Repeat([]byte("<p>a page of the benchmark, with some text in it.</p>\n"), 300)
			var next atomic.Int64
			b.SetParallelism(16) // 32 writers at GOMAXPROCS 2
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					t := tasks[next.Add(1)-1]
					at := time.Now().UTC()
					st := 200
					sum := downloader.Summary{Domain: t.Domain, HTTPStatus: &st, HasReachedOrigin: true}
					end := &downloader.TaskEnd{
						Report: &downloader.Report{TaskID: t.TaskID, Summary: sum, FetchedAt: at},
						Page:   &downloader.Page{URL: t.URL, ContentType: "text/html", FetchedAt: at, Body: append(fmt.Appendf(nil, "<!-- %s -->", t.TaskID), body...)},
						Result: &downloader.FetchResult{Summary: sum, TaskID: t.TaskID, URL: t.URL, Entry: downloader.EntryLease, FetchedAt: at},
					}
					var err error
					if path == "pebble" {
						err = q.CommitTask(ctx, end)
					} else {
						err = g.commit(ctx, end)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
			if path == "grouped" {
				b.ReportMetric(float64(b.N)/float64(max(1, g.groups.Load())), "tasks/group")
			}
			if c := q.Counts(); c.DoneCount != b.N {
				b.Errorf("%d tasks done, want %d", c.DoneCount, b.N)
			}
		})
	}
}

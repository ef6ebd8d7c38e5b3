package localqueue

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
	"downloader/outbox"
	"downloader/store/embedded"
)

// BenchmarkTaskEnd is the end of entry A's tasks with the local queue, as many at once as
// a busy lease loop ends (32 writers), each with a page of its own (about 16 KiB) and a
// fetch_result: every write durable before the task counts as done. Run with, for
// example:
//
//	go test -run '^$' -bench TaskEnd -benchmem ./localqueue/
//
// committer: the queue commits the page, the result and its change of state in one
// synchronous write (lease.Config.Committer, the crawl's wiring). outbox: the page, the
// result and the report in one synchronous write of the outbox, then the queue takes the
// report and the outbox deletes it (the crawl with discovery, and the path every task
// took before).
func BenchmarkTaskEnd(b *testing.B) {
	for _, path := range []string{"committer", "outbox"} {
		b.Run("path="+path, func(b *testing.B) {
			benchTaskEnds(b, func(s *embedded.Store, q *Queue) taskCommit {
				if path == "committer" {
					return q.CommitTask
				}
				o := outbox.New(s)
				return func(ctx context.Context, end *downloader.TaskEnd) error {
					if err := o.CommitTask(ctx, end); err != nil {
						return err
					}
					if err := q.Report(ctx, end.Report); err != nil {
						return err
					}
					return o.DeleteReports(ctx, []downloader.Report{*end.Report})
				}
			})
		})
	}
}

// taskCommit makes one task's end durable.
type taskCommit func(ctx context.Context, end *downloader.TaskEnd) error

// benchTaskEnds is the task-end benchmarks' run: a queue on a new embedded store with b.N
// tasks over 1,000 domains leased, then ended by 32 writers at once (GOMAXPROCS 2), each
// task with a page of its own and a fetch_result, through the commit that setup makes of
// the store and the queue. It reports tasks/s and checks that every task is done.
func benchTaskEnds(b *testing.B, setup func(s *embedded.Store, q *Queue) taskCommit) {
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
	commit := setup(s, q)
	tasks := leasedTasks(b, q, b.N)
	body := bytes.Repeat([]byte("<p>a page of the benchmark, with some text in it.</p>\n"), 300)
	var next atomic.Int64
	b.SetParallelism(16) // 32 writers at GOMAXPROCS 2
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t := tasks[next.Add(1)-1]
			page := append(fmt.Appendf(nil, "<!-- %s -->", t.TaskID), body...)
			if err := commit(ctx, taskEnd(t, page)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
	if c := q.Counts(); c.DoneCount != b.N {
		b.Errorf("%d tasks done, want %d", c.DoneCount, b.N)
	}
}

// leasedTasks submits n tasks over 1,000 domains and leases them all.
func leasedTasks(b *testing.B, q *Queue, n int) []downloader.Task {
	b.Helper()
	ctx := context.Background()
	zero := int64(0)
	for lo := 0; lo < n; lo += MaxSubmitCount {
		var ts []downloader.Task
		for i := lo; i < min(n, lo+MaxSubmitCount); i++ {
			ts = append(ts, downloader.Task{URL: fmt.Sprintf("http://d%d.test/%d", i%1000, i), MinIntervalMs: &zero})
		}
		if _, err := q.Submit(ctx, ts); err != nil {
			b.Fatal(err)
		}
	}
	var out []downloader.Task
	for len(out) < n {
		got, err := q.Lease(ctx, "bench", 1000)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) == 0 {
			b.Fatalf("leased %d of %d tasks", len(out), n)
		}
		out = append(out, got...)
	}
	return out
}

func taskEnd(t downloader.Task, body []byte) *downloader.TaskEnd {
	at := time.Now().UTC()
	status := 200
	s := downloader.Summary{Domain: t.Domain, HTTPStatus: &status, HasReachedOrigin: true}
	return &downloader.TaskEnd{
		Report: &downloader.Report{TaskID: t.TaskID, Summary: s, FetchedAt: at},
		Page:   &downloader.Page{URL: t.URL, ContentType: "text/html", FetchedAt: at, Body: body},
		Result: &downloader.FetchResult{Summary: s, TaskID: t.TaskID, URL: t.URL, Entry: downloader.EntryLease, FetchedAt: at},
	}
}

package localqueue

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/store/embedded/embeddedtest"
)

// crashImage copies the files of the open store in dir to a new directory, as a kill -9
// of the process would leave them: what Pebble wrote to its files is there (the kernel
// keeps it), what it still held in memory is not. The store is not closed, so nothing is
// flushed for the image.
func crashImage(t *testing.T, dir string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "image")
	if err := os.MkdirAll(img, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		src, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(img, e.Name()))
		if err == nil {
			_, err = io.Copy(dst, src)
			if cerr := dst.Close(); err == nil {
				err = cerr
			}
		}
		src.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// TestCrashVoidsLeases: a lease is kept in memory only (Lease writes nothing), so after a
// crash every task leased and not ended is pending again, with nothing to undo on open,
// while what was committed before the crash holds: a task's end synced by CommitTask
// (done, retried in place, waiting out a backoff), and the lease ends written without a
// sync (a release, an expiry) once a later synced commit carried them. Each case leases
// the three tasks a, b and c, acts, takes the image a kill -9 would leave, opens it and
// checks each task's state and lease count and what the reopened queue hands out.
func TestCrashVoidsLeases(t *testing.T) {
	type want struct {
		state      downloader.TaskState
		leaseCount int
	}
	tests := []struct {
		name string
		act  func(t *testing.T, q *Queue, clk *clocktest.Fake)
		want map[string]want
		// leased: what the reopened queue hands out at once, and after every backoff.
		leased, leasedLater []string
	}{
		{name: "leased, nothing ended",
			act:    func(*testing.T, *Queue, *clocktest.Fake) {},
			want:   map[string]want{"a": {downloader.TaskQueued, 0}, "b": {downloader.TaskQueued, 0}, "c": {downloader.TaskQueued, 0}},
			leased: []string{"a", "b", "c"}},
		{name: "one end committed",
			act: func(t *testing.T, q *Queue, clk *clocktest.Fake) {
				commit(t, q, commitEnd("a", "http://a.test/", clk.Now()))
			},
			want:   map[string]want{"a": {downloader.TaskDone, 1}, "b": {downloader.TaskQueued, 0}, "c": {downloader.TaskQueued, 0}},
			leased: []string{"b", "c"}},
		{name: "own failure retried in place",
			act: func(t *testing.T, q *Queue, clk *clocktest.Fake) {
				commit(t, q, &downloader.TaskEnd{Report: failReport("a", clk.Now(), downloader.FailRendererCrashed)})
			},
			want:   map[string]want{"a": {downloader.TaskQueued, 1}, "b": {downloader.TaskQueued, 0}, "c": {downloader.TaskQueued, 0}},
			leased: []string{"a", "b", "c"}},
		{name: "failure at the origin waits out its backoff",
			act: func(t *testing.T, q *Queue, clk *clocktest.Fake) {
				commit(t, q, &downloader.TaskEnd{Report: statusReport("a", clk.Now(), 503, nil)})
			},
			want:   map[string]want{"a": {downloader.TaskQueued, 1}, "b": {downloader.TaskQueued, 0}, "c": {downloader.TaskQueued, 0}},
			leased: []string{"b", "c"}, leasedLater: []string{"a"}},
		{name: "released, then another end synced",
			act: func(t *testing.T, q *Queue, clk *clocktest.Fake) {
				if err := q.Release(t.Context(), "a", 0); err != nil {
					t.Fatal(err)
				}
				commit(t, q, commitEnd("b", "http://b.test/", clk.Now()))
			},
			want:   map[string]want{"a": {downloader.TaskQueued, 1}, "b": {downloader.TaskDone, 1}, "c": {downloader.TaskQueued, 0}},
			leased: []string{"a", "c"}},
		{name: "leases expired and leased again, then an end synced",
			act: func(t *testing.T, q *Queue, clk *clocktest.Fake) {
				clk.Advance(2 * time.Minute)
				if got := lease(t, q, 3); len(got) != 3 {
					t.Fatalf("after the expiry leased %v, want the three again", urls(got))
				}
				commit(t, q, commitEnd("c", "http://c.test/", clk.Now()))
			},
			want:   map[string]want{"a": {downloader.TaskQueued, 1}, "b": {downloader.TaskQueued, 1}, "c": {downloader.TaskDone, 2}},
			leased: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			s := embeddedtest.Open(t, dir)
			clk := clocktest.NewFake(queueStart)
			q := openRetryQueue(t, s, clk)
			for _, id := range []string{"a", "b", "c"} {
				submit(t, q, downloader.Task{TaskID: id, URL: "http://" + id + ".test/", MinIntervalMs: ms(0)})
			}
			if got := lease(t, q, 3); len(got) != 3 {
				t.Fatalf("leased %v, want three", urls(got))
			}
			tt.act(t, q, clk)
			checkPendingIndex(t, q, "before the crash")

			q2 := openRetryQueue(t, embeddedtest.Open(t, crashImage(t, dir)), clk)
			checkPendingIndex(t, q2, "after the crash")
			if c := q2.Counts(); c.LeasedCount != 0 {
				t.Fatalf("counts after the crash = %+v, want nothing leased", c)
			}
			for id, w := range tt.want {
				rec := taskRecord(t, q2, id)
				if rec.Status() != w.state || rec.LeaseCount != w.leaseCount {
					t.Errorf("%s after the crash: %s with lease_count %d, want %s with %d", id, rec.Status(), rec.LeaseCount, w.state, w.leaseCount)
				}
			}
			ids := func(tasks []downloader.Task) []string {
				var out []string
				for _, task := range tasks {
					out = append(out, task.TaskID)
				}
				slices.Sort(out)
				return out
			}
			if got := ids(lease(t, q2, 10)); !slices.Equal(got, tt.leased) {
				t.Errorf("after the crash leased %v, want %v", got, tt.leased)
			}
			clk.Advance(time.Hour) // past every backoff (and every lease of q2)
			if got := ids(lease(t, q2, 10)); !slices.Equal(got, sortedUnion(tt.leasedLater, tt.leased)) {
				t.Errorf("after the backoffs leased %v, want %v again with %v", got, tt.leased, tt.leasedLater)
			}
		})
	}
}

func commit(t *testing.T, q *Queue, end *downloader.TaskEnd) {
	t.Helper()
	if err := q.CommitTask(t.Context(), end); err != nil {
		t.Fatalf("CommitTask(%s): %v", end.Report.TaskID, err)
	}
}

func sortedUnion(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return out
}

package localqueue

import (
	"downloader/clock/clocktest"
	"downloader/store/embedded/embeddedtest"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"downloader"
	"downloader/store/embedded"
)

// TestFreshRecords: the first lease of a task submitted by this process hands out the
// record kept from the submit without reading it back, for at most FreshRecordCount
// tasks; a record written again since (a report of the pending task) is read from the
// store, never served stale; after a restart every record is read.
func TestFreshRecords(t *testing.T) {
	cases := []struct {
		name       string
		freshCount int
		// removeStored deletes the stored records after the submit: a lease that reads
		// one finds none and fails, one served from memory does not.
		removeStored bool
		reopen       bool
		wantFresh    int  // fresh records after the submit of four tasks
		wantErr      bool // the lease fails (a record had to be read)
	}{
		{name: "kept from the submit", freshCount: 10, removeStored: true, wantFresh: 4},
		{name: "bounded", freshCount: 2, removeStored: true, wantFresh: 2, wantErr: true},
		{name: "none", freshCount: -1, removeStored: true, wantFresh: 0, wantErr: true},
		{name: "read after a restart", freshCount: 10, reopen: true, wantFresh: 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			s, err := embedded.Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			clk := clocktest.NewFake(queueStart)
			cfg := Config{Clock: clk, LeaseDuration: time.Minute, FreshRecordCount: tc.freshCount}
			q, err := Open(t.Context(), s, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var tasks []downloader.Task
			for i := range 4 {
				tasks = append(tasks, downloader.Task{URL: fmt.Sprintf("http://h%d.test/", i), MinIntervalMs: ms(0), ShouldStore: true})
			}
			res := submit(t, q, tasks...)
			if n := len(q.fresh); n != tc.wantFresh {
				t.Fatalf("%d fresh records after the submit, want %d", n, tc.wantFresh)
			}
			if tc.removeStored {
				for _, r := range res {
					if err := q.ks.Delete([]byte(queueTaskPrefix+r.TaskID), nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.reopen {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if q, err = Open(t.Context(), embeddedtest.Open(t, dir), cfg); err != nil {
					t.Fatal(err)
				}
				if len(q.fresh) != 0 {
					t.Fatalf("%d fresh records after a restart", len(q.fresh))
				}
			} else {
				t.Cleanup(func() { _ = s.Close() })
			}
			got, err := q.Lease(t.Context(), "w1", 10)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Lease: %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if len(got) != 4 {
				t.Fatalf("leased %v, want four", urls(got))
			}
			for i, task := range got {
				if task.URL != tasks[i].URL || !task.ShouldStore || task.Domain != fmt.Sprintf("h%d.test", i) || task.LeaseExpiresAt.IsZero() {
					t.Fatalf("leased task %d = %+v", i, task)
				}
			}
			if len(q.fresh) != 0 {
				t.Fatalf("%d fresh records after every task was leased", len(q.fresh))
			}
		})
	}
}

// TestFreshRecordNotStale: a pending task whose record is written again before its first
// lease (a report of the pending task, retried in place) is leased with the record as
// written, so that what the next report writes counts both failures.
func TestFreshRecordNotStale(t *testing.T) {
	s := embeddedtest.Open(t, filepath.Join(t.TempDir(), "store"))
	clk := clocktest.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	id := submit(t, q, downloader.Task{URL: "http://a.test/1", MinIntervalMs: ms(0)})[0].TaskID
	if _, ok := q.fresh[id]; !ok {
		t.Fatal("no fresh record after the submit")
	}
	// A report of the pending task (a run of a lease that expired, say): ours, retried
	// in place.
	if err := q.Report(t.Context(), failReport(id, clk.Now(), downloader.FailRendererCrashed)); err != nil {
		t.Fatal(err)
	}
	if _, ok := q.fresh[id]; ok {
		t.Fatal("fresh record kept after the record was written again")
	}
	got := lease(t, q, 1)
	if len(got) != 1 {
		t.Fatalf("leased %v", urls(got))
	}
	clk.Advance(time.Second)
	if err := q.Report(t.Context(), failReport(id, clk.Now(), downloader.FailRendererCrashed)); err != nil {
		t.Fatal(err)
	}
	rec, err := q.Task(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.OwnFailureCount != 2 || rec.LeaseCount != 1 {
		t.Fatalf("own_failure_count %d, lease_count %d; want 2 and 1", rec.OwnFailureCount, rec.LeaseCount)
	}
}

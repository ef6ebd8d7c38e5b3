package localqueue

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/store/embedded"
)

// TestLeaseKeepsRecord: a lease writes only the index keys (the pending key goes, the
// leased key comes) and leaves the stored record as it was, while every reader (Task,
// ListTasks, a duplicate Submit) still sees the task leased, with its expiry and count.
func TestLeaseKeepsRecord(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "store"))
	clk := clock.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	task := downloader.Task{URL: "http://a.test/1", MinIntervalMs: ms(0)}
	res := submit(t, q, task)
	id := res[0].TaskID
	raw := func(key string) ([]byte, bool) {
		t.Helper()
		v, ok, err := q.ks.Get([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return v, ok
	}
	before, _ := raw(queueTaskPrefix + id)
	got := lease(t, q, 1)
	if len(got) != 1 || got[0].TaskID != id {
		t.Fatalf("leased %v", urls(got))
	}
	after, _ := raw(queueTaskPrefix + id)
	if !bytes.Equal(before, after) {
		t.Fatalf("record rewritten by the lease:\n%s\nwas\n%s", after, before)
	}
	if _, ok := raw(queueLeasPrefix + id); !ok {
		t.Fatal("no leased key after the lease")
	}
	if _, ok := raw(string(pendingKey("a.test", 1))); ok {
		t.Fatal("pending key still there after the lease")
	}
	wantExpiry := queueStart.Add(time.Minute)
	rec, err := q.Task(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != TaskLeased || rec.LeaseCount != 1 || !rec.LeaseExpiresAt.Equal(wantExpiry) {
		t.Fatalf("Task = state %s, lease_count %d, lease_expires_at %v; want leased, 1, %v", rec.State, rec.LeaseCount, rec.LeaseExpiresAt, wantExpiry)
	}
	listed, _, err := q.ListTasks(t.Context(), downloader.TaskLeased, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].TaskID != id || listed[0].LeaseExpiresAt == nil || !listed[0].LeaseExpiresAt.Equal(wantExpiry) {
		t.Fatalf("ListTasks(leased) = %+v", listed)
	}
	if again := submit(t, q, task); !again[0].IsDuplicate || again[0].State != string(downloader.TaskLeased) {
		t.Fatalf("duplicate Submit = %+v, want is_duplicate and state leased", again[0])
	}
	// Ending the lease writes the record, the lease counted.
	if err := q.Release(t.Context(), id, 0); err != nil {
		t.Fatal(err)
	}
	if rec, err := q.Task(t.Context(), id); err != nil || rec.State != TaskPending || rec.LeaseCount != 1 {
		t.Fatalf("after release Task = %+v, %v; want pending, lease_count 1", rec, err)
	}
}

// TestLeaseRestart: a process that stops (or crashes) with tasks leased leaves each of
// them to be leased again or finished by its report (from the outbox), never lost and
// never handed out twice by the new process; the lease counts and the counts agree.
func TestLeaseRestart(t *testing.T) {
	cases := []struct {
		name string
		// run is the old process's work on the six tasks h0…h5, all leased first.
		run func(t *testing.T, q *Queue, clk *clock.Fake, leased []downloader.Task)
		// oldFormat writes the leased tasks' records as an older version did (state
		// leased in the record).
		oldFormat bool
		// reportAfter: the old run's report of h0, delivered again after the restart.
		reportAfter bool
		wantLeased  []string       // handed out by the new process, in any order
		wantDone    int            // done after the restart (and its reports)
		wantCount   map[string]int // lease_count of some tasks after the new process leased them
	}{
		{name: "all leased", run: func(*testing.T, *Queue, *clock.Fake, []downloader.Task) {},
			wantLeased: []string{"h0", "h1", "h2", "h3", "h4", "h5"}, wantCount: map[string]int{"h0": 2, "h5": 2}},
		{name: "some reported, one released", run: func(t *testing.T, q *Queue, clk *clock.Fake, l []downloader.Task) {
			for _, task := range l[:2] {
				if err := q.Report(t.Context(), okReport(task.TaskID, clk.Now(), "")); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Release(t.Context(), l[2].TaskID, 0); err != nil {
				t.Fatal(err)
			}
		}, wantLeased: []string{"h2", "h3", "h4", "h5"}, wantDone: 2, wantCount: map[string]int{"h2": 2, "h3": 2}},
		{name: "an expired lease leased again", run: func(t *testing.T, q *Queue, clk *clock.Fake, l []downloader.Task) {
			clk.Advance(2 * time.Minute) // past every lease: all pending again
			if got := lease(t, q, 1); len(got) != 1 {
				t.Fatalf("after expiry leased %v", urls(got))
			}
		}, wantLeased: []string{"h0", "h1", "h2", "h3", "h4", "h5"}, wantCount: map[string]int{"h0": 3, "h1": 2}},
		{name: "the old run's report comes after the restart", run: func(*testing.T, *Queue, *clock.Fake, []downloader.Task) {},
			reportAfter: true, wantLeased: []string{"h1", "h2", "h3", "h4", "h5"}, wantDone: 1, wantCount: map[string]int{"h1": 2}},
		{name: "records of an older version", oldFormat: true, run: func(*testing.T, *Queue, *clock.Fake, []downloader.Task) {},
			wantLeased: []string{"h0", "h1", "h2", "h3", "h4", "h5"}, wantCount: map[string]int{"h0": 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			s, err := embedded.Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			clk := clock.NewFake(queueStart)
			q := openQueueTest(t, s, clk)
			for i := range 6 {
				submit(t, q, downloader.Task{TaskID: fmt.Sprintf("h%d", i), URL: fmt.Sprintf("http://h%d.test/", i), MinIntervalMs: ms(0)})
			}
			leased := lease(t, q, 10)
			if len(leased) != 6 {
				t.Fatalf("leased %v, want all six", urls(leased))
			}
			tc.run(t, q, clk, leased)
			if tc.oldFormat {
				for _, task := range leased {
					rec, ok, err := q.record(nil, task.TaskID)
					if err != nil || !ok {
						t.Fatalf("record %s: %v %v", task.TaskID, ok, err)
					}
					rec.State, rec.LeaseExpiresAt, rec.LeaseCount = TaskLeased, clk.Now().Add(time.Minute), 1
					b := q.ks.NewBatch()
					if err := q.putRecord(b, rec); err != nil {
						t.Fatal(err)
					}
					if err := b.Commit(nil); err != nil {
						t.Fatal(err)
					}
					_ = b.Close()
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			q2 := openQueueTest(t, openTest(t, dir), clk)
			if tc.reportAfter {
				if err := q2.Report(t.Context(), okReport("h0", clk.Now(), "")); err != nil {
					t.Fatal(err)
				}
			}
			c := q2.Counts()
			if c.LeasedCount != 0 || c.DoneCount != tc.wantDone || c.PendingCount != 6-tc.wantDone {
				t.Fatalf("counts after restart = %+v; want 0 leased, %d done, %d pending", c, tc.wantDone, 6-tc.wantDone)
			}
			var again []string
			for {
				more := lease(t, q2, 10)
				if len(more) == 0 {
					break
				}
				for _, task := range more {
					again = append(again, task.TaskID)
				}
			}
			slices.Sort(again)
			if !slices.Equal(again, tc.wantLeased) {
				t.Fatalf("after restart leased %v, want %v (each once)", again, tc.wantLeased)
			}
			for id, n := range tc.wantCount {
				rec, err := q2.Task(t.Context(), id)
				if err != nil {
					t.Fatal(err)
				}
				if rec.State != TaskLeased || rec.LeaseCount != n {
					t.Errorf("%s: state %s, lease_count %d; want leased, %d", id, rec.State, rec.LeaseCount, n)
				}
			}
			if c := q2.Counts(); c.LeasedCount != len(tc.wantLeased) || c.PendingCount != 6-tc.wantDone-len(tc.wantLeased) {
				t.Fatalf("counts after leasing again = %+v", c)
			}
		})
	}
}

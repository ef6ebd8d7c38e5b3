package localqueue

import (
	"downloader/clock/clocktest"
	"downloader/store/embedded/embeddedtest"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/store/embedded"
)

var queueStart = time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC)

func ms(n int64) *int64 { return &n }

func openQueueTest(t *testing.T, s *embedded.Store, clk clock.Clock) *Queue {
	t.Helper()
	q, err := Open(t.Context(), s, Config{Clock: clk, LeaseDuration: time.Minute,
		Lookahead: 500 * time.Millisecond, DefaultMinInterval: 2 * time.Second})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q
}

func submit(t *testing.T, q *Queue, tasks ...downloader.Task) []SubmitResult {
	t.Helper()
	res, err := q.Submit(t.Context(), tasks)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return res
}

func lease(t *testing.T, q *Queue, n int) []downloader.Task {
	t.Helper()
	got, err := q.Lease(t.Context(), "w1", n)
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	return got
}

func urls(tasks []downloader.Task) []string {
	var out []string
	for _, t := range tasks {
		out = append(out, t.URL)
	}
	return out
}

func okReport(id string, at time.Time, page string) *downloader.Report {
	st := 200
	return &downloader.Report{TaskID: id, Summary: downloader.Summary{HTTPStatus: &st, HasReachedOrigin: true}, FetchedAt: at, PageKey: page}
}

func failReport(id string, at time.Time, r downloader.FailReason) *downloader.Report {
	return &downloader.Report{TaskID: id, Summary: downloader.Summary{FailReason: &r, HasReachedOrigin: r.HasReachedOrigin()}, FetchedAt: at}
}

func TestCheckTask(t *testing.T) {
	tests := []struct {
		name  string
		task  downloader.Task
		field string
		url   string
	}{
		{"canonical", downloader.Task{URL: "HTTP://News.Example.TW/a?b=1#frag"}, "", "http://news.example.tw/a?b=1"},
		{"domain matches", downloader.Task{URL: "http://a.test/", Domain: "A.test."}, "", "http://a.test/"},
		{"no url", downloader.Task{}, "url", ""},
		{"ftp", downloader.Task{URL: "ftp://a.test/"}, "url", ""},
		{"domain mismatch", downloader.Task{URL: "http://a.test/", Domain: "b.test"}, "domain", ""},
		{"negative interval", downloader.Task{URL: "http://a.test/", MinIntervalMs: ms(-1)}, "min_interval_ms", ""},
		{"interval over an hour", downloader.Task{URL: "http://a.test/", MinIntervalMs: ms(3_600_001)}, "min_interval_ms", ""},
		{"lease set", downloader.Task{URL: "http://a.test/", LeaseExpiresAt: queueStart}, "lease_expires_at", ""},
		{"task id with space", downloader.Task{URL: "http://a.test/", TaskID: "a b"}, "task_id", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckTask(tt.task, time.Second, downloader.HeaderPolicy{})
			if tt.field != "" {
				if downloader.ErrorCode(err) != downloader.EINVALID || downloader.ErrorField(err) != tt.field {
					t.Fatalf("err = %v, want EINVALID naming %q", err, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.URL != tt.url || got.MinIntervalMs == nil || *got.MinIntervalMs != 1000 {
				t.Errorf("got %+v (interval %v)", got, got.MinIntervalMs)
			}
		})
	}
}

func TestQueueSubmitDeduplicates(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	clk := clocktest.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	res := submit(t, q,
		downloader.Task{URL: "http://a.test/1"},
		downloader.Task{URL: "http://A.TEST/1#top"}, // same page
		downloader.Task{URL: "http://a.test/2", MinIntervalMs: ms(0)},
	)
	if res[0].IsDuplicate || !res[1].IsDuplicate || res[1].TaskID != res[0].TaskID || res[2].IsDuplicate {
		t.Fatalf("results = %+v", res)
	}
	if c := q.Counts(); c.PendingCount != 2 || c.TotalCount() != 2 {
		t.Fatalf("counts = %+v", c)
	}
	// Invalid in the middle: nothing is queued.
	if _, err := q.Submit(t.Context(), []downloader.Task{{URL: "http://a.test/3"}, {URL: "nope"}}); downloader.ErrorField(err) != "url" {
		t.Fatalf("Submit with a bad URL: %v", err)
	}
	if c := q.Counts(); c.PendingCount != 2 {
		t.Fatalf("a refused submission queued something: %+v", c)
	}
	// A given task id is kept; a taken one is refused.
	if res := submit(t, q, downloader.Task{URL: "http://b.test/", TaskID: "mine-1"}); res[0].TaskID != "mine-1" {
		t.Fatalf("task id = %q", res[0].TaskID)
	}
	if _, err := q.Submit(t.Context(), []downloader.Task{{URL: "http://b.test/other", TaskID: "mine-1"}}); downloader.ErrorField(err) != "task_id" {
		t.Fatalf("reused task id: %v", err)
	}
	// Done tasks stay deduplicated: resubmitting the list queues nothing.
	got := lease(t, q, 10)
	for _, tk := range got {
		if err := q.Report(t.Context(), okReport(tk.TaskID, clk.Now(), "")); err != nil {
			t.Fatal(err)
		}
	}
	res = submit(t, q, downloader.Task{URL: "http://a.test/1"})
	if !res[0].IsDuplicate || res[0].State != TaskDone {
		t.Fatalf("resubmitted done URL: %+v", res[0])
	}
}

// TestQueuePacing: a domain's tasks are handed out no faster than their interval and at
// most the lookahead early; domains due first come first.
func TestQueuePacing(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	clk := clocktest.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	var tasks []downloader.Task
	for i := range 3 {
		tasks = append(tasks, downloader.Task{URL: fmt.Sprintf("http://a.test/%d", i), MinIntervalMs: ms(1000)})
	}
	for i := range 2 {
		tasks = append(tasks, downloader.Task{URL: fmt.Sprintf("http://b.test/%d", i), MinIntervalMs: ms(1000)})
	}
	tasks = append(tasks, downloader.Task{URL: "http://c.test/0", MinIntervalMs: ms(0)}, downloader.Task{URL: "http://c.test/1", MinIntervalMs: ms(0)})
	submit(t, q, tasks...)

	steps := []struct {
		advance time.Duration
		want    []string
	}{
		{0, []string{"http://a.test/0", "http://b.test/0", "http://c.test/0", "http://c.test/1"}},
		{400 * time.Millisecond, nil},                                            // a and b are due at +1s: not within 500 ms yet
		{100 * time.Millisecond, []string{"http://a.test/1", "http://b.test/1"}}, // +0.5s: due within the lookahead
		{500 * time.Millisecond, nil},                                            // a's third is due at +2s
		{500 * time.Millisecond, []string{"http://a.test/2"}},
		{time.Second, nil},
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		leased := lease(t, q, 10)
		for _, l := range leased {
			if !l.IsPaced {
				t.Errorf("step %d: %s not marked paced: the queue spaces its domains itself", i, l.URL)
			}
		}
		got := urls(leased)
		slices.Sort(got)
		if !slices.Equal(got, st.want) {
			t.Fatalf("step %d: leased %v, want %v", i, got, st.want)
		}
	}
	if c := q.Counts(); c.LeasedCount != 7 || c.PendingCount != 0 {
		t.Fatalf("counts = %+v", c)
	}
}

func TestQueueLeaseLimitAndOrder(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	clk := clocktest.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	for d := range 5 {
		for i := range 3 {
			submit(t, q, downloader.Task{URL: fmt.Sprintf("http://d%d.test/%d", d, i), MinIntervalMs: ms(60_000)})
		}
	}
	// One task per domain is due; at most 3 per call.
	if got := lease(t, q, 3); len(got) != 3 {
		t.Fatalf("leased %d, want 3", len(got))
	}
	if got := lease(t, q, 10); len(got) != 2 {
		t.Fatalf("leased %d, want the 2 domains left", len(got))
	}
	if got := lease(t, q, 10); len(got) != 0 {
		t.Fatalf("leased %v before any domain is due", urls(got))
	}
}

// TestQueueLeaseExpiry: a lease not reported in time is handed out again; the late report
// of the first lease still finishes the task, and the second report changes nothing.
func TestQueueLeaseExpiry(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	clk := clocktest.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	submit(t, q, downloader.Task{URL: "http://a.test/", MinIntervalMs: ms(0)})
	first := lease(t, q, 1)
	if len(first) != 1 || !first[0].LeaseExpiresAt.Equal(queueStart.Add(time.Minute)) {
		t.Fatalf("first lease = %+v", first)
	}
	clk.Advance(59 * time.Second)
	if got := lease(t, q, 1); len(got) != 0 {
		t.Fatalf("leased again before expiry: %v", got)
	}
	clk.Advance(time.Second)
	second := lease(t, q, 1)
	if len(second) != 1 || second[0].TaskID != first[0].TaskID {
		t.Fatalf("after expiry leased %+v, want the same task", second)
	}
	if err := q.Report(t.Context(), okReport(first[0].TaskID, clk.Now(), "k1")); err != nil {
		t.Fatal(err)
	}
	if err := q.Report(t.Context(), failReport(first[0].TaskID, clk.Now(), downloader.FailConnectionReset)); err != nil {
		t.Fatal(err)
	}
	c := q.Counts()
	if c.DoneCount != 1 || c.SucceededCount != 1 || c.LeasedCount != 0 || c.PageCount != 1 || len(c.FailedCount) != 0 {
		t.Fatalf("counts = %+v", c)
	}
	rec, err := q.Task(t.Context(), first[0].TaskID)
	if err != nil || rec.State != TaskDone || rec.LeaseCount != 2 || rec.Report.PageKey != "k1" {
		t.Fatalf("record = %+v, %v", rec, err)
	}
	if err := q.Report(t.Context(), okReport("nope", clk.Now(), "")); downloader.ErrorCode(err) != downloader.ENOTFOUND {
		t.Fatalf("report of an unknown task: %v", err)
	}
}

// TestQueueRelease: a released task is first of its domain again, not before retryAfter.
func TestQueueRelease(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	clk := clocktest.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	submit(t, q, downloader.Task{URL: "http://a.test/1", MinIntervalMs: ms(0)}, downloader.Task{URL: "http://a.test/2", MinIntervalMs: ms(0)})
	got := lease(t, q, 1)
	if err := q.Release(t.Context(), got[0].TaskID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := q.Release(t.Context(), got[0].TaskID, 5*time.Second); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if c := q.Counts(); c.PendingCount != 2 || c.LeasedCount != 0 {
		t.Fatalf("counts = %+v", c)
	}
	clk.Advance(4 * time.Second)
	if got := lease(t, q, 5); len(got) != 0 {
		t.Fatalf("leased %v within retry_after", urls(got))
	}
	clk.Advance(time.Second)
	again := lease(t, q, 1)
	if len(again) != 1 || again[0].URL != "http://a.test/1" {
		t.Fatalf("after retry_after leased %v, want a.test/1 first", urls(again))
	}
}

// TestQueueRestart: after the store is closed and opened again (a crash or a stop), the
// counts and the done tasks are as they were and every lease of the old run is pending.
func TestQueueRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := embedded.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	var tasks []downloader.Task
	for i := range 6 {
		tasks = append(tasks, downloader.Task{URL: fmt.Sprintf("http://h%d.test/", i), MinIntervalMs: ms(0)})
	}
	submit(t, q, tasks...)
	got := lease(t, q, 4)
	if err := q.Report(t.Context(), okReport(got[0].TaskID, clk.Now(), "")); err != nil {
		t.Fatal(err)
	}
	if err := q.Report(t.Context(), failReport(got[1].TaskID, clk.Now(), downloader.FailInvalidTask)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Lease(t.Context(), "w1", 1); downloader.ErrorCode(err) != downloader.EUNAVAILABLE {
		t.Fatalf("Lease on a closed store: %v", err)
	}

	s2 := embeddedtest.Open(t, dir)
	q2 := openQueueTest(t, s2, clk)
	c := q2.Counts()
	if c.DoneCount != 2 || c.PendingCount != 4 || c.LeasedCount != 0 || c.OwnFailureCount() != 1 || c.FailedCount[downloader.FailInvalidTask] != 1 {
		t.Fatalf("counts after restart = %+v", c)
	}
	// The report of a lease of the old run (kept in the outbox) still finishes its task.
	if err := q2.Report(t.Context(), okReport(got[2].TaskID, clk.Now(), "")); err != nil {
		t.Fatal(err)
	}
	var left []string
	for {
		more := lease(t, q2, 10)
		if len(more) == 0 {
			break
		}
		left = append(left, urls(more)...)
	}
	slices.Sort(left)
	want := []string{got[3].URL, "http://h4.test/", "http://h5.test/"}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("after restart leased %v, want %v", left, want)
	}
	// Submitting the same list again queues nothing (crawl resumes).
	for _, r := range submit(t, q2, tasks...) {
		if !r.IsDuplicate {
			t.Fatalf("resubmitted %s was queued again", r.URL)
		}
	}
	done := 0
	if err := q2.RangeDone(t.Context(), func(*downloader.Task, *downloader.Report) bool { done++; return true }); err != nil || done != 3 {
		t.Fatalf("RangeDone: %d, %v", done, err)
	}
}

// TestQueueCountsStored: only a report writes the stored counts, and they hold only what no
// index gives back; on open the pending and leased counts come from the indexes, whatever
// a directory written before stored for them.
func TestQueueCountsStored(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := embedded.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	stored := func() string {
		t.Helper()
		v, _, err := q.ks.Get([]byte(queueCountsKey))
		if err != nil {
			t.Fatal(err)
		}
		return string(v)
	}
	submit(t, q, downloader.Task{URL: "http://a.test/1", MinIntervalMs: ms(0)}, downloader.Task{URL: "http://b.test/1", MinIntervalMs: ms(0)},
		downloader.Task{URL: "http://c.test/1", MinIntervalMs: ms(0)})
	got := lease(t, q, 2)
	if v := stored(); v != "" {
		t.Fatalf("counts stored by a submit or a lease: %s", v)
	}
	if err := q.Report(t.Context(), okReport(got[0].TaskID, clk.Now(), "p")); err != nil {
		t.Fatal(err)
	}
	want := `{"done_count":1,"succeeded_count":1,"page_count":1}` // zero counts left out
	if v := stored(); v != want {
		t.Fatalf("stored counts after a report = %s, want %s", v, want)
	}
	if err := q.Release(t.Context(), got[1].TaskID, 0); err != nil {
		t.Fatal(err)
	}
	lease(t, q, 1)
	if v := stored(); v != want {
		t.Fatalf("stored counts after a release and a lease = %s, want %s (unchanged)", v, want)
	}
	// As a build that stored every count would have left it, stale.
	old := `{"pending_count":99,"leased_count":7,"done_count":1,"succeeded_count":1,"skipped_count":0,"retry_count":0,"failed_count":{},"page_count":1}`
	if err := q.ks.Set([]byte(queueCountsKey), []byte(old), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	q2 := openQueueTest(t, embeddedtest.Open(t, dir), clk)
	c := q2.Counts()
	if c.PendingCount != 2 || c.LeasedCount != 0 || c.DoneCount != 1 || c.SucceededCount != 1 || c.PageCount != 1 || c.TotalCount() != 3 {
		t.Fatalf("counts after reopen = %+v; want 2 pending (one back from its lease), 0 leased, 1 done", c)
	}
}

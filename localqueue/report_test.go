package localqueue

import (
	"maps"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/store/embedded"
	"downloader/store/embedded/embeddedtest"
)

// commitEnd is a task's end as the engine returns it: a 200 with a page and its result.
func commitEnd(id, url string, at time.Time) *downloader.TaskEnd {
	return &downloader.TaskEnd{
		Report: okReport(id, at, ""),
		Page:   &downloader.Page{URL: url, ContentType: "text/html", FetchedAt: at, Body: []byte("<p>" + id + "</p>")},
		Result: &downloader.FetchResult{Summary: downloader.Summary{Domain: "a.test"}, TaskID: id, URL: url,
			Entry: downloader.EntryLease, FetchedAt: at},
	}
}

// TestCommitTaskOneWrite: CommitTask finishes the task, and its page and fetch_result are
// in the same write: all three are there after a reopen, with the page's key.
func TestCommitTaskOneWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := embedded.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	submit(t, q, downloader.Task{TaskID: "a1", URL: "http://a.test/1", MinIntervalMs: ms(0)})
	got := lease(t, q, 1)
	if len(got) != 1 {
		t.Fatalf("leased %v", urls(got))
	}
	end := commitEnd("a1", "http://a.test/1", queueStart)
	if err := q.CommitTask(t.Context(), end); err != nil {
		t.Fatal(err)
	}
	key := end.Report.PageKey
	if key == "" || end.Result.PageKey != key {
		t.Fatalf("page keys: report %q, result %q", key, end.Result.PageKey)
	}
	if c := q.Counts(); c.DoneCount != 1 || c.LeasedCount != 0 || c.PageCount != 1 {
		t.Errorf("counts = %+v, want one done with a page", c)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = embeddedtest.Open(t, dir)
	q = openQueueTest(t, s, clk)
	rec, err := q.Task(t.Context(), "a1")
	if err != nil || rec.State != TaskDone || rec.Report == nil || rec.Report.PageKey != key {
		t.Fatalf("task after reopen: %+v, %v", rec, err)
	}
	if _, err := s.Page(t.Context(), key); err != nil {
		t.Errorf("page after reopen: %v", err)
	}
	rs, _, err := s.FetchResults(t.Context(), "a.test", 10, "")
	if err != nil || len(rs) != 1 || rs[0].PageKey != key {
		t.Errorf("fetch results after reopen: %+v, %v", rs, err)
	}
}

// TestCommitTaskUnknownTask: the end of a task the queue does not know is committed (its
// page and result are kept) and the report refused with ENOTFOUND; a repeated end of a
// finished task changes nothing in the queue.
func TestCommitTaskUnknownTask(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	clk := clocktest.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	end := commitEnd("nope", "http://a.test/x", queueStart)
	if err := q.CommitTask(t.Context(), end); downloader.ErrorCode(err) != downloader.ENOTFOUND {
		t.Fatalf("CommitTask: %v, want ENOTFOUND", err)
	}
	if _, err := s.Page(t.Context(), end.Report.PageKey); err != nil {
		t.Errorf("page of the unknown task: %v", err)
	}
	submit(t, q, downloader.Task{TaskID: "a1", URL: "http://a.test/1", MinIntervalMs: ms(0)})
	lease(t, q, 1)
	if err := q.CommitTask(t.Context(), commitEnd("a1", "http://a.test/1", queueStart)); err != nil {
		t.Fatal(err)
	}
	before := q.Counts()
	if err := q.CommitTask(t.Context(), commitEnd("a1", "http://a.test/1", queueStart.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	if after := q.Counts(); after.DoneCount != before.DoneCount || after.PageCount != before.PageCount {
		t.Errorf("counts after a repeated end: %+v, want %+v", after, before)
	}
}

// TestFinishRecordLeavesSharedCounts: finishRecord counts a task into next, whose failed
// counts' map is the one in memory until the batch commits; a failure is counted into a
// copy, so a batch that fails to commit leaves the counts in memory as they were.
func TestFinishRecordLeavesSharedCounts(t *testing.T) {
	timeout := downloader.FailResponseTimeout
	tests := []struct {
		name       string
		report     downloader.Report
		wantFailed map[downloader.FailReason]int
		wantDone   int
		isCopied   bool // next's map is a copy, not the one in memory
	}{
		{"success", downloader.Report{PageKey: "k"}, map[downloader.FailReason]int{downloader.FailSelfRateLimited: 1}, 1, false},
		{"failure", downloader.Report{Summary: downloader.Summary{FailReason: &timeout}},
			map[downloader.FailReason]int{downloader.FailSelfRateLimited: 1, timeout: 1}, 1, true},
		{"skipped", downloader.Report{SkipReason: "robots_disallowed"}, map[downloader.FailReason]int{downloader.FailSelfRateLimited: 1}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inMemory := Counts{FailedCount: map[downloader.FailReason]int{downloader.FailSelfRateLimited: 1}}
			next := inMemory
			finishRecord(&queueRecord{}, &tt.report, &next)
			if want := map[downloader.FailReason]int{downloader.FailSelfRateLimited: 1}; !maps.Equal(inMemory.FailedCount, want) {
				t.Errorf("counts in memory changed to %v, want %v", inMemory.FailedCount, want)
			}
			if !maps.Equal(next.FailedCount, tt.wantFailed) || next.DoneCount != tt.wantDone {
				t.Errorf("next = %+v, want failed %v, done %d", next, tt.wantFailed, tt.wantDone)
			}
			if isCopied := reflect.ValueOf(next.FailedCount).UnsafePointer() != reflect.ValueOf(inMemory.FailedCount).UnsafePointer(); isCopied != tt.isCopied {
				t.Errorf("map copied = %v, want %v", isCopied, tt.isCopied)
			}
		})
	}
}

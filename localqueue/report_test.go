package localqueue

import (
	"path/filepath"
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

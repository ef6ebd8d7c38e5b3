package localqueue

import (
	"path/filepath"
	"testing"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/store/embedded"
)

// TestTaskEndBytes bounds what a plain fetch's end writes to the write-ahead log (without
// a page: should_store=false): the queue's record with its report, the fetch_result with
// its domain index entry, the counts and the pending entry's delete. Every byte of it is
// written again by a flush and by compactions, so a field or a copy that grows it fails
// here. The record, its report, the result and the counts leave out their null and zero
// fields (Report.AppendStoredJSON, encodeQueueRecord, appendStoredCounts): 1,263 B, where
// the same end written in full (json.Marshal's form) was 2,167 B.
func TestTaskEndBytes(t *testing.T) {
	s, err := embedded.Open(filepath.Join(t.TempDir(), "store"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	clk := clocktest.NewFake(queueStart)
	q := openQueueTest(t, s, clk)
	submit(t, q, downloader.Task{URL: "http://www.example-host-0042.test/section/page-0017.html", MinIntervalMs: ms(100)})
	got := lease(t, q, 1)
	if len(got) != 1 {
		t.Fatalf("leased %v", urls(got))
	}
	task := got[0]
	at := clk.Now().Add(123456789)
	status, raw, h11 := 200, 5321, "1.1"
	// As the engine reports a plain fetch's success (engine.taskEnd): no render counts.
	s200 := downloader.Summary{Domain: task.Domain, HTTPStatus: &status, RawTextLength: &raw, HasReachedOrigin: true,
		HealthSignal: &downloader.HealthSignal{ElapsedMs: 23, BodyBytes: 18342, ContentType: "text/html; charset=utf-8", HTTPVersion: &h11}}
	end := &downloader.TaskEnd{
		Report: &downloader.Report{TaskID: task.TaskID, Summary: s200, FetchedAt: at},
		Result: &downloader.FetchResult{Summary: s200, TaskID: task.TaskID, URL: task.URL, Entry: downloader.EntryLease, FetchedAt: at},
	}
	before := s.WALBytesIn()
	if err := q.CommitTask(t.Context(), end); err != nil {
		t.Fatal(err)
	}
	n := s.WALBytesIn() - before
	const maxBytes = 1300
	t.Logf("a plain fetch's end wrote %d B to the write-ahead log", n)
	if n > maxBytes {
		t.Fatalf("a plain fetch's end wrote %d B to the write-ahead log, over %d", n, maxBytes)
	}
	if n == 0 {
		t.Fatal("nothing written: the measure is broken")
	}
}

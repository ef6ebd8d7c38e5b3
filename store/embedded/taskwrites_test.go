package embedded_test

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/outbox"
	"downloader/store/embedded"
	"downloader/store/embedded/embeddedtest"
)

// These tests are of package embedded_test: a task's end is committed by the outbox's
// CommitTask (package outbox, which imports this one).

// taskEnd is what the engine returns for one task of a.test that stored body.
func taskEnd(taskID, body string, at time.Time) *downloader.TaskEnd {
	return &downloader.TaskEnd{
		Report: &downloader.Report{TaskID: taskID, FetchedAt: at},
		Page:   &downloader.Page{URL: "http://a.test/" + taskID, ContentType: "text/html", FetchedAt: at, Body: []byte(body)},
		Result: &downloader.FetchResult{Summary: downloader.Summary{Domain: "a.test"}, TaskID: taskID, URL: "http://a.test/" + taskID,
			Entry: downloader.EntryLease, FetchedAt: at},
	}
}

func resultCount(t *testing.T, s *embedded.Store, domain string) int {
	t.Helper()
	rs, _, err := s.FetchResults(t.Context(), domain, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	return len(rs)
}

// TestTaskEndCommitsAsOne: the page, the fetch_result and the report of a task's end are
// committed by one CommitTask, carry the page's key, and survive a reopen.
func TestTaskEndCommitsAsOne(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := embedded.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := outbox.New(s)
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	end := taskEnd("t1", "<p>one</p>", at)
	if err := o.CommitTask(t.Context(), end); err != nil {
		t.Fatal(err)
	}
	key := end.Report.PageKey
	if len(key) != 64 || end.Result.PageKey != key {
		t.Fatalf("page keys: report %q, result %q; want the page's", key, end.Result.PageKey)
	}
	if n := embedded.PageWriteCount(s); n != 1 {
		t.Errorf("pages written: %d, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = embeddedtest.Open(t, dir)
	if _, err := s.Page(t.Context(), key); err != nil {
		t.Errorf("page after reopen: %v", err)
	}
	rs, _, err := s.FetchResults(t.Context(), "a.test", 10, "")
	if err != nil || len(rs) != 1 || rs[0].PageKey != key {
		t.Errorf("fetch results of a.test after reopen: %+v, %v", rs, err)
	}
	reps, err := outbox.New(s).PendingReports(t.Context(), "", 10)
	if err != nil || len(reps) != 1 || reps[0].PageKey != key || !reps[0].FetchedAt.Equal(at) {
		t.Errorf("reports after reopen: %+v, %v", reps, err)
	}
}

// TestTaskEndInvalidResult: an end whose fetch_result cannot be stored commits nothing.
func TestTaskEndInvalidResult(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	o := outbox.New(s)
	end := taskEnd("t1", "<p>two</p>", time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	end.Result.FetchedAt = time.Time{}
	if err := o.CommitTask(t.Context(), end); downloader.ErrorField(err) != "fetched_at" {
		t.Fatalf("CommitTask: %v, want an error naming fetched_at", err)
	}
	if n := resultCount(t, s, ""); n != 0 {
		t.Errorf("%d fetch results, want 0", n)
	}
	if n, err := o.ReportCount(t.Context()); err != nil || n != 0 {
		t.Errorf("reports: %d, %v; want none", n, err)
	}
	if _, err := s.Page(t.Context(), pageKeyOf("<p>two</p>")); downloader.ErrorCode(err) != downloader.ENOTFOUND {
		t.Errorf("page: %v, want ENOTFOUND", err)
	}
}

// TestTaskEndSameBody: a body staged in a task's batch is written once, and a writer of
// the same body meanwhile returns only once that batch is committed.
func TestTaskEndSameBody(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	ks := s.OutboxKeyspace()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	end := taskEnd("a", "<p>same</p>", at)
	release, err := ks.Acquire(t.Context(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	b := ks.NewBatch()
	defer b.Close()
	done, err := ks.StageTaskEnd(t.Context(), b, end)
	if err != nil {
		t.Fatal(err)
	}
	key := end.Report.PageKey
	other := make(chan error, 1)
	go func() {
		_, err := s.PutPage(t.Context(), &downloader.Page{URL: "http://b.test/", Body: []byte("<p>same</p>")})
		if err == nil {
			// Returned: the body must be durable by now.
			_, err = s.Page(t.Context(), key)
		}
		other <- err
	}()
	err = b.Commit(pebble.Sync)
	done(err)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Errorf("the other writer: %v", err)
	}
	if n := embedded.PageWriteCount(s); n != 1 {
		t.Errorf("pages written: %d, want 1", n)
	}
	p, err := s.Page(t.Context(), key)
	if err != nil || p.URL != "http://a.test/a" {
		t.Errorf("page: %+v, %v; want the staged page's metadata", p, err)
	}
}

// pageKeyOf is the page store's key of body: the hex of its SHA-256.
func pageKeyOf(body string) string {
	sum := sha256.Sum256([]byte(body))
	return hex.EncodeToString(sum[:])
}

package embedded_test

import (
	"context"
	"downloader/store/embedded/embeddedtest"
	"path/filepath"
	"testing"
	"time"

	"downloader"
	"downloader/outbox"
	"downloader/store/embedded"
)

// These tests are of package embedded_test: the task scope is committed by the outbox's
// PutReport (package outbox, which imports this one).

// putTask stores what the engine stores for one task (a page, a fetch_result) under ctx.
func putTask(t *testing.T, ctx context.Context, s *embedded.Store, body string, at time.Time) string {
	t.Helper()
	key, err := s.PutPage(ctx, &downloader.Page{URL: "http://a.test/", ContentType: "text/html", FetchedAt: at, Body: []byte(body)})
	if err != nil {
		t.Fatalf("PutPage: %v", err)
	}
	r := &downloader.FetchResult{Summary: downloader.Summary{Domain: "a.test"}, TaskID: "t1", URL: "http://a.test/",
		Entry: downloader.EntryLease, FetchedAt: at, PageKey: key}
	if err := s.PutFetchResult(ctx, r); err != nil {
		t.Fatalf("PutFetchResult: %v", err)
	}
	return key
}

func resultCount(t *testing.T, s *embedded.Store, domain string) int {
	t.Helper()
	rs, _, err := s.FetchResults(t.Context(), domain, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	return len(rs)
}

// TestTaskWritesCommitWithReport: under a task scope the page and the fetch_result are
// written by the report's commit, not before, and survive a reopen.
func TestTaskWritesCommitWithReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := embedded.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := outbox.New(s)
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	ctx, end := o.WithTaskWrites(t.Context())
	key := putTask(t, ctx, s, "<p>one</p>", at)
	if _, err := s.Page(t.Context(), key); downloader.ErrorCode(err) != downloader.ENOTFOUND {
		t.Fatalf("page before the report: err %v, want ENOTFOUND", err)
	}
	if n := resultCount(t, s, ""); n != 0 {
		t.Fatalf("%d fetch results before the report, want 0", n)
	}
	if err := o.PutReport(ctx, &downloader.Report{TaskID: "t1", FetchedAt: at, PageKey: key}); err != nil {
		t.Fatal(err)
	}
	if err := end(); err != nil {
		t.Fatalf("end: %v", err)
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
	if n := resultCount(t, s, "a.test"); n != 1 {
		t.Errorf("%d fetch results of a.test after reopen, want 1", n)
	}
	rs, err := outbox.New(s).PendingReports(t.Context(), "", 10)
	if err != nil || len(rs) != 1 || rs[0].PageKey != key || !rs[0].FetchedAt.Equal(at) {
		t.Errorf("reports after reopen: %+v, %v", rs, err)
	}
}

// TestTaskWritesEndWithoutReport: what a task stored without a report is committed by end.
func TestTaskWritesEndWithoutReport(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	o := outbox.New(s)
	ctx, end := o.WithTaskWrites(t.Context())
	key := putTask(t, ctx, s, "<p>two</p>", time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	if err := end(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Page(t.Context(), key); err != nil {
		t.Errorf("page after end: %v", err)
	}
	if n := resultCount(t, s, ""); n != 1 {
		t.Errorf("%d fetch results after end, want 1", n)
	}
	if n, err := o.ReportCount(t.Context()); err != nil || n != 0 {
		t.Errorf("reports: %d, %v; want none", n, err)
	}
}

// TestTaskWritesSameBody: a page body another task's scope holds is written once, and a
// writer of the same body returns only after that scope committed it.
func TestTaskWritesSameBody(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	o := outbox.New(s)
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	ctxA, endA := o.WithTaskWrites(t.Context())
	key := putTask(t, ctxA, s, "<p>same</p>", at)
	// The same scope storing the body again does not wait for itself.
	if k, err := s.PutPage(ctxA, &downloader.Page{URL: "http://a.test/x", Body: []byte("<p>same</p>")}); err != nil || k != key {
		t.Fatalf("PutPage again in the scope: %q, %v", k, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.PutPage(t.Context(), &downloader.Page{URL: "http://b.test/", Body: []byte("<p>same</p>")})
		if err == nil {
			// Returned: the body must be durable by now.
			_, err = s.Page(t.Context(), key)
		}
		done <- err
	}()
	if err := o.PutReport(ctxA, &downloader.Report{TaskID: "a", FetchedAt: at, PageKey: key}); err != nil {
		t.Fatal(err)
	}
	if err := endA(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("the other writer: %v", err)
	}
	if n := embedded.PageWriteCount(s); n != 1 {
		t.Errorf("pages written: %d, want 1", n)
	}
	p, err := s.Page(t.Context(), key)
	if err != nil || p.URL != "http://a.test/" {
		t.Errorf("page: %+v, %v; want the first writer's metadata", p, err)
	}
}

package localqueue

import (
	"downloader/clock/clocktest"
	"downloader/store/embedded/embeddedtest"
	"path/filepath"
	"testing"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/store/embedded"
)

func openRetryQueue(t *testing.T, s *embedded.Store, clk clock.Clock) *Queue {
	t.Helper()
	q, err := Open(t.Context(), s, Config{Clock: clk, LeaseDuration: time.Minute,
		Lookahead: time.Millisecond, DefaultMinInterval: 0,
		MaxAttemptCount: 3, RetryBaseDelay: 2 * time.Second, RetryMaxDelay: time.Minute, MaxOwnFailureCount: 2,
		Jitter: func() float64 { return 0.5 }})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q
}

func statusReport(id string, at time.Time, status int, retryAfterSeconds *int64) *downloader.Report {
	r := downloader.FailHTTPStatusError
	return &downloader.Report{TaskID: id, FetchedAt: at, Summary: downloader.Summary{HTTPStatus: &status,
		FailReason: &r, HasReachedOrigin: true, HealthSignal: &downloader.HealthSignal{RetryAfterSeconds: retryAfterSeconds}}}
}

func taskRecord(t *testing.T, q *Queue, id string) *TaskRecord {
	t.Helper()
	rec, err := q.Task(t.Context(), id)
	if err != nil {
		t.Fatalf("Task(%s): %v", id, err)
	}
	return rec
}

func TestFailureClass(t *testing.T) {
	st := func(n int) *downloader.Report { return statusReport("t", queueStart, n, nil) }
	fr := func(r downloader.FailReason) *downloader.Report { return failReport("t", queueStart, r) }
	tests := []struct {
		name string
		r    *downloader.Report
		want string
	}{
		{"success", okReport("t", queueStart, ""), "final"},
		{"skipped by robots", &downloader.Report{TaskID: "t", SkipReason: downloader.SkipRobotsDisallowed}, "final"},
		{"503", st(503), "transient"},
		{"500", st(500), "transient"},
		{"429", st(429), "transient"},
		{"408", st(408), "transient"},
		{"404", st(404), "final"},
		{"403", st(403), "final"},
		{"response timeout", fr(downloader.FailResponseTimeout), "transient"},
		{"connect timeout", fr(downloader.FailConnectTimeout), "transient"},
		{"reset", fr(downloader.FailConnectionReset), "transient"},
		{"refused", fr(downloader.FailConnectRefused), "final"},
		{"nxdomain", fr(downloader.FailDomainNotFound), "final"},
		{"tls", fr(downloader.FailTLSFailed), "final"},
		{"forbidden destination", fr(downloader.FailDestinationForbidden), "final"},
		{"resolver (ours)", fr(downloader.FailResolverUnavailable), "own"},
		{"renderer crashed (ours)", fr(downloader.FailRendererCrashed), "own"},
		{"egress (ours)", fr(downloader.FailEgressUnavailable), "own"},
		{"invalid task (ours, but final)", fr(downloader.FailInvalidTask), "final"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FailureClass(tt.r); got != tt.want {
				t.Fatalf("FailureClass = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	for _, tt := range []struct {
		jitter  float64
		attempt int
		want    time.Duration
	}{
		{0, 1, time.Second}, {0.5, 1, 1500 * time.Millisecond}, {0.999, 1, 1999 * time.Millisecond},
		{0, 2, 2 * time.Second}, {0, 3, 4 * time.Second}, {0, 40, 30 * time.Second}, {1, 40, time.Minute},
	} {
		c := Config{RetryBaseDelay: 2 * time.Second, RetryMaxDelay: time.Minute, Jitter: func() float64 { return tt.jitter }}
		if got := c.backoff(tt.attempt); got != tt.want {
			t.Errorf("backoff(%d) with jitter %v = %v, want %v", tt.attempt, tt.jitter, got, tt.want)
		}
	}
}

// TestQueueRetryOwnFailureInPlace: a failure of our own goes back at once, first of its
// domain, without counting an attempt; after MaxOwnFailureCount of them it is final.
func TestQueueRetryOwnFailureInPlace(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	clk := clocktest.NewFake(queueStart)
	q := openRetryQueue(t, s, clk)
	submit(t, q, downloader.Task{URL: "http://a.test/1"}, downloader.Task{URL: "http://a.test/2"})
	for i := 1; i <= 3; i++ {
		got := lease(t, q, 1)
		if len(got) != 1 || got[0].URL != "http://a.test/1" {
			t.Fatalf("round %d: leased %v, want a.test/1 first again", i, urls(got))
		}
		clk.Advance(time.Millisecond) // a distinct fetched_at per run
		if err := q.Report(t.Context(), failReport(got[0].TaskID, clk.Now(), downloader.FailRendererCrashed)); err != nil {
			t.Fatal(err)
		}
		rec := taskRecord(t, q, got[0].TaskID)
		if rec.AttemptCount != 0 || rec.OwnFailureCount != i {
			t.Fatalf("round %d: attempt_count %d, own_failure_count %d", i, rec.AttemptCount, rec.OwnFailureCount)
		}
		wantStatus := downloader.TaskQueued
		if i == 3 {
			wantStatus = downloader.TaskFailed
		}
		if rec.Status() != wantStatus || !rec.NextAttemptAt.IsZero() {
			t.Fatalf("round %d: status %s (next_attempt_at %v), want %s", i, rec.Status(), rec.NextAttemptAt, wantStatus)
		}
	}
	c := q.Counts()
	if c.RetryCount != 2 || c.DoneCount != 1 || c.OwnFailureCount() != 1 || c.PendingCount != 1 {
		t.Fatalf("counts = %+v", c)
	}
}

// TestQueueRetryBackoff: a 500 comes back after the backoff (not before), with the attempt
// counted, until MaxAttemptCount; the domain's other tasks are not held by a plain backoff
// (a 500 is not the origin pushing back: pushback_test.go has the 429 and 503).
func TestQueueRetryBackoff(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	clk := clocktest.NewFake(queueStart)
	q := openRetryQueue(t, s, clk)
	res := submit(t, q, downloader.Task{URL: "http://a.test/1"}, downloader.Task{URL: "http://a.test/2"})
	id := res[0].TaskID
	got := lease(t, q, 1)
	if len(got) != 1 || got[0].TaskID != id {
		t.Fatalf("leased %v", urls(got))
	}
	// Nominal waits 2 s then 4 s, jitter 0.5 of the upper half: 1.5 s, then 3 s.
	waits := []time.Duration{1500 * time.Millisecond, 3 * time.Second}
	for i, wait := range waits {
		if err := q.Report(t.Context(), statusReport(id, clk.Now(), 500, nil)); err != nil {
			t.Fatal(err)
		}
		rec := taskRecord(t, q, id)
		if rec.AttemptCount != i+1 || rec.Status() != downloader.TaskQueued || !rec.NextAttemptAt.Equal(clk.Now().Add(wait)) {
			t.Fatalf("after attempt %d: attempt_count %d, status %s, next_attempt_at %v, want %v", i+1,
				rec.AttemptCount, rec.Status(), rec.NextAttemptAt, clk.Now().Add(wait))
		}
		if i == 0 {
			// The other task of the domain is not held by the backoff.
			if other := lease(t, q, 5); len(other) != 1 || other[0].URL != "http://a.test/2" {
				t.Fatalf("during the backoff leased %v, want a.test/2 alone", urls(other))
			}
		}
		clk.Advance(wait - time.Millisecond)
		if early := lease(t, q, 5); len(early) != 0 {
			t.Fatalf("leased %v before next_attempt_at", urls(early))
		}
		clk.Advance(time.Millisecond)
		again := lease(t, q, 5)
		if len(again) != 1 || again[0].TaskID != id {
			t.Fatalf("after the backoff leased %v, want the retried task", urls(again))
		}
	}
	if err := q.Report(t.Context(), statusReport(id, clk.Now(), 500, nil)); err != nil {
		t.Fatal(err)
	}
	rec := taskRecord(t, q, id)
	if rec.AttemptCount != 3 || rec.Status() != downloader.TaskFailed || rec.Report == nil || *rec.Report.HTTPStatus != 500 {
		t.Fatalf("after the last attempt: %+v", rec)
	}
	c := q.Counts()
	if c.RetryCount != 2 || c.FailedCount[downloader.FailHTTPStatusError] != 1 || c.LeasedCount != 1 {
		t.Fatalf("counts = %+v", c)
	}
}

// TestQueueRetryAfter: the origin's Retry-After is honoured, for the task and its domain,
// and survives a restart of the queue; one above an hour counts as an hour.
func TestQueueRetryAfter(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := embedded.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.NewFake(queueStart)
	q := openRetryQueue(t, s, clk)
	res := submit(t, q, downloader.Task{URL: "http://a.test/1"}, downloader.Task{URL: "http://c.test/1"})
	if got := lease(t, q, 4); len(got) != 2 {
		t.Fatalf("leased %v", urls(got))
	}
	ra := int64(30)
	if err := q.Report(t.Context(), statusReport(res[0].TaskID, clk.Now(), 429, &ra)); err != nil {
		t.Fatal(err)
	}
	long := int64(7200)
	if err := q.Report(t.Context(), statusReport(res[1].TaskID, clk.Now(), 503, &long)); err != nil {
		t.Fatal(err)
	}
	// The hold covers the domain's other tasks; another domain is not held.
	submit(t, q, downloader.Task{URL: "http://a.test/2"}, downloader.Task{URL: "http://b.test/1"})
	if got := lease(t, q, 5); len(got) != 1 || got[0].URL != "http://b.test/1" {
		t.Fatalf("during a.test's Retry-After leased %v, want b.test/1 alone", urls(got))
	}
	if rec := taskRecord(t, q, res[1].TaskID); rec.Status() != downloader.TaskQueued || !rec.NextAttemptAt.Equal(clk.Now().Add(time.Hour)) {
		t.Fatalf("a Retry-After of two hours: status %s, next_attempt_at %v; want queued, now + the longest wait (1 h)", rec.Status(), rec.NextAttemptAt)
	}
	rec := taskRecord(t, q, res[0].TaskID)
	if !rec.NextAttemptAt.Equal(clk.Now().Add(30 * time.Second)) {
		t.Fatalf("next_attempt_at = %v, want now + 30 s", rec.NextAttemptAt)
	}
	clk.Advance(10 * time.Second)
	if early := lease(t, q, 5); len(early) != 0 {
		t.Fatalf("leased %v while a.test asked for 30 s", urls(early))
	}
	// A restart keeps the task's backoff (the domain's hold is memory only).
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := embeddedtest.Open(t, dir)
	q2 := openRetryQueue(t, s2, clk)
	clk.Advance(20*time.Second - time.Millisecond)
	for _, l := range lease(t, q2, 5) {
		if l.TaskID == res[0].TaskID {
			t.Fatalf("the retried task came back before its Retry-After")
		}
	}
	clk.Advance(time.Millisecond)
	back := lease(t, q2, 5)
	found := false
	for _, l := range back {
		found = found || l.TaskID == res[0].TaskID
	}
	if !found {
		t.Fatalf("after its Retry-After leased %v, want the retried task", urls(back))
	}
}

// TestQueueReportDuplicate: a report repeated after the task went back to pending (same
// fetched_at) or while it waits out a backoff changes nothing.
func TestQueueReportDuplicate(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	clk := clocktest.NewFake(queueStart)
	q := openRetryQueue(t, s, clk)
	res := submit(t, q, downloader.Task{URL: "http://a.test/1"}, downloader.Task{URL: "http://b.test/1"})
	lease(t, q, 2)
	own := failReport(res[0].TaskID, clk.Now(), downloader.FailResolverUnavailable)
	for range 2 {
		if err := q.Report(t.Context(), own); err != nil {
			t.Fatal(err)
		}
	}
	if rec := taskRecord(t, q, res[0].TaskID); rec.OwnFailureCount != 1 {
		t.Fatalf("a repeated report counted twice: own_failure_count %d", rec.OwnFailureCount)
	}
	origin := statusReport(res[1].TaskID, clk.Now(), 502, nil)
	for range 2 {
		if err := q.Report(t.Context(), origin); err != nil {
			t.Fatal(err)
		}
	}
	if rec := taskRecord(t, q, res[1].TaskID); rec.AttemptCount != 1 {
		t.Fatalf("a repeated report counted twice: attempt_count %d", rec.AttemptCount)
	}
	if c := q.Counts(); c.RetryCount != 2 || c.PendingCount != 2 {
		t.Fatalf("counts = %+v", c)
	}
}

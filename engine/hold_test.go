package engine

import (
	"errors"
	"math"
	"net/url"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/retryafter"
)

// asking answers 429 with Retry-After secs on /busy (from final, when set: a redirect's
// end), 200 elsewhere.
func asking(secs int64, final string) func(u *url.URL) *downloader.Outcome {
	return func(u *url.URL) *downloader.Outcome {
		if u.Path != "/busy" {
			return &downloader.Outcome{HTTPStatus: 200, Cause: downloader.CauseOK}
		}
		out := &downloader.Outcome{HTTPStatus: 429, FinalURL: final, FailReason: downloader.FailHTTPStatusError}
		out.HealthSignal.RetryAfterSeconds = &secs
		return out
	}
}

// newAskingEngine is an engine whose origin answers as answer says, with no default
// interval (newEngineAnswering).
func newAskingEngine(t *testing.T, answer func(u *url.URL) *downloader.Outcome) (*Engine, *clocktest.Fake, *recordingFetcher) {
	t.Helper()
	e, clk, f, _ := newEngineAnswering(t, answer, 0)
	return e, clk, f
}

func request(raw string, entry downloader.Entry) (downloader.Request, *url.URL) {
	u, _ := url.Parse(raw)
	return downloader.Request{URL: raw, Domain: u.Hostname(), Entry: entry, IntervalSource: downloader.IntervalSourceRequest}, u
}

// TestOriginWaitOnEveryEntry: after a 429 with Retry-After 30 s, B is refused with the
// remaining wait, C answers self_rate_limited (not reached, no status) with it in
// health_signal.retry_after_seconds, and A waits for the end of the wait (fixed instants
// on the fake clock).
func TestOriginWaitOnEveryEntry(t *testing.T) {
	e, clk, f := newAskingEngine(t, asking(30, ""))
	ctx := t.Context()
	req, u := request("http://a.test/busy", downloader.EntryProbe)
	if s := e.Probe(ctx, req, u); s.HTTPStatus == nil || *s.HTTPStatus != 429 || !s.HasReachedOrigin {
		t.Fatalf("the asking probe: %+v", s)
	}
	askedAt := clk.Now()
	clk.Advance(10 * time.Second)

	req, u = request("http://a.test/b", downloader.EntryRender)
	_, err := e.Render(ctx, req, u)
	var ol *downloader.OverLimitError
	if !errors.As(err, &ol) || ol.Reason != downloader.FailSelfRateLimited || ol.RetryAfter != 20*time.Second || ol.RetryAfterSeconds() != 20 {
		t.Fatalf("B during the wait: %v, want 429 self_rate_limited after 20 s", err)
	}
	req, u = request("http://a.test/c", downloader.EntryProbe)
	s := e.Probe(ctx, req, u)
	if s.FailReason == nil || *s.FailReason != downloader.FailSelfRateLimited || s.HasReachedOrigin || s.HTTPStatus != nil ||
		s.HealthSignal == nil || s.HealthSignal.RetryAfterSeconds == nil || *s.HealthSignal.RetryAfterSeconds != 20 {
		t.Fatalf("C during the wait: %+v (health_signal %+v)", s, s.HealthSignal)
	}
	// Another domain is not held.
	req, u = request("http://other.test/c", downloader.EntryProbe)
	if s := e.Probe(ctx, req, u); s.FailReason != nil {
		t.Fatalf("another domain during the wait: %+v", s)
	}

	done := make(chan downloader.LeaseReply, 1)
	go func() {
		done <- e.RunTask(ctx, &downloader.Task{TaskID: "t", URL: "http://a.test/a", MinIntervalMs: ms(0), LeaseExpiresAt: clk.Now().Add(10 * time.Minute)})
	}()
	clk.WaitTimers(1)
	clk.Advance(20*time.Second - time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("A ran before the end of the origin's wait: %+v", r)
	default:
	}
	clk.Advance(time.Millisecond)
	if r := <-done; r.Report == nil || r.Report.FailReason != nil {
		t.Fatalf("A after the wait: %+v", r)
	}
	w := f.wires()
	if last := w[len(w)-1]; last.Before(askedAt.Add(30 * time.Second)) {
		t.Fatalf("A went on the wire %v after the ask, want at least 30 s", last.Sub(askedAt))
	}
}

// TestOriginWaitHandsTheTaskBack: a wait past the lease hands entry A's task back at once
// with the remaining wait, capped at the longest wait honoured whatever the number.
func TestOriginWaitHandsTheTaskBack(t *testing.T) {
	for _, secs := range []int64{600, 18446744074, math.MaxInt64} {
		e, clk, f := newAskingEngine(t, asking(secs, ""))
		req, u := request("http://a.test/busy", downloader.EntryProbe)
		e.Probe(t.Context(), req, u)
		r := e.RunTask(t.Context(), &downloader.Task{TaskID: "t", URL: "http://a.test/a", MinIntervalMs: ms(0), LeaseExpiresAt: clk.Now().Add(time.Minute)})
		want := min(time.Duration(min(secs, retryafter.MaxWaitSeconds))*time.Second, retryafter.MaxWait)
		if !r.Release || r.RetryAfter != want {
			t.Fatalf("Retry-After %d: %+v, want a release after %v", secs, r, want)
		}
		if n := len(f.wires()); n != 1 {
			t.Fatalf("Retry-After %d: %d requests on the wire, want the asking one alone", secs, n)
		}
	}
}

// TestOriginWaitBeginsWhileATaskWaits: a task that reserved its slot and waits for it,
// when the origin asks for a wait meanwhile, reserves again after the wait.
func TestOriginWaitBeginsWhileATaskWaits(t *testing.T) {
	e, clk, f := newAskingEngine(t, asking(30, ""))
	ctx := t.Context()
	req, u := request("http://a.test/first", downloader.EntryProbe)
	e.Probe(ctx, req, u)
	done := make(chan downloader.LeaseReply, 1)
	go func() {
		done <- e.RunTask(ctx, &downloader.Task{TaskID: "t", URL: "http://a.test/a", MinIntervalMs: ms(5000), LeaseExpiresAt: clk.Now().Add(10 * time.Minute)})
	}()
	clk.WaitTimers(1) // the task waits for its slot, 5 s on
	heldAt := clk.Now().Add(time.Second)
	clk.Advance(time.Second)
	e.cfg.Limiter.HoldDomain(heldAt, "a.test", 30*time.Second) // another entry's 429
	clk.Advance(4 * time.Second)                               // the task's slot
	clk.WaitTimers(1)
	select {
	case r := <-done:
		t.Fatalf("A ran at its old slot, inside the origin's wait: %+v", r)
	default:
	}
	clk.Advance(heldAt.Add(30 * time.Second).Sub(clk.Now()))
	if r := <-done; r.Report == nil || r.Report.FailReason != nil {
		t.Fatalf("A after the wait: %+v", r)
	}
	if w := f.wires(); w[len(w)-1].Before(heldAt.Add(30 * time.Second)) {
		t.Fatalf("A went on the wire at %v, before the end of the wait %v", w[len(w)-1], heldAt.Add(30*time.Second))
	}
}

// TestOriginWaitHoldsTheAnsweringDomain: after a redirect, the host that answered 429 is
// held, not the one first asked; other statuses and answers without Retry-After hold
// nothing.
func TestOriginWaitHoldsTheAnsweringDomain(t *testing.T) {
	e, clk, _ := newAskingEngine(t, asking(30, "http://b.test/busy"))
	req, u := request("http://a.test/busy", downloader.EntryProbe)
	e.Probe(t.Context(), req, u)
	if st, ok := e.cfg.Limiter.Domain(clk.Now(), "b.test"); !ok || st.HoldUntilAt.IsZero() {
		t.Fatalf("b.test (which answered): %+v, want held", st)
	}
	if st, _ := e.cfg.Limiter.Domain(clk.Now(), "a.test"); !st.HoldUntilAt.IsZero() {
		t.Fatalf("a.test (which redirected): held until %v", st.HoldUntilAt)
	}

	for _, out := range []*downloader.Outcome{
		{HTTPStatus: 500, FailReason: downloader.FailHTTPStatusError, HealthSignal: downloader.HealthSignal{RetryAfterSeconds: new(int64(30))}},
		{HTTPStatus: 503, FailReason: downloader.FailHTTPStatusError},
		{HTTPStatus: 429, FailReason: downloader.FailHTTPStatusError, HealthSignal: downloader.HealthSignal{RetryAfterSeconds: new(int64(0))}},
	} {
		e, clk, _ := newAskingEngine(t, func(*url.URL) *downloader.Outcome { return out })
		req, u := request("http://a.test/x", downloader.EntryProbe)
		e.Probe(t.Context(), req, u)
		if st, _ := e.cfg.Limiter.Domain(clk.Now(), "a.test"); !st.HoldUntilAt.IsZero() {
			t.Fatalf("%d with Retry-After %v held the domain", out.HTTPStatus, out.HealthSignal.RetryAfterSeconds)
		}
	}
}

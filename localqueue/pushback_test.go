package localqueue

import (
	"math"
	"strconv"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/retryafter"
	"downloader/store/embedded/embeddedtest"
)

func TestPushbackWait(t *testing.T) {
	tests := []struct {
		count  int
		jitter float64
		want   time.Duration
	}{
		{1, 0, 2500 * time.Millisecond},
		{1, 0.5, 3750 * time.Millisecond},
		{1, 0.999, 4997500 * time.Microsecond},
		{2, 0, 5 * time.Second},
		{3, 0, 10 * time.Second},
		{4, 1, 40 * time.Second},
		{7, 1, PushbackMaxDelay},           // 5 s × 64 is past the cap
		{7, 0, PushbackMaxDelay / 2},       // never less than half the capped wait
		{math.MaxInt, 1, PushbackMaxDelay}, // no overflow however many
		{1, -3, 2500 * time.Millisecond},   // a jitter out of range is clamped
		{1, 7, 5 * time.Second},
	}
	for _, tt := range tests {
		if got := pushbackWait(tt.count, tt.jitter); got != tt.want {
			t.Errorf("pushbackWait(%d, %v) = %v, want %v", tt.count, tt.jitter, got, tt.want)
		}
	}
}

// TestPushbacksCurve: the curve doubles within a run, is forgiven after a quiet time, and
// forgets domains that were quiet (bounded memory).
func TestPushbacksCurve(t *testing.T) {
	var p pushbacks
	at := queueStart
	one := func() float64 { return 1 }
	for i, want := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second} {
		if got := p.next("a.test", at, one); got != want {
			t.Fatalf("pushback %d: %v, want %v", i+1, got, want)
		}
		at = at.Add(PushbackForgiveAfter - time.Second) // not quiet long enough
	}
	at = at.Add(time.Second) // now quiet for the whole forgive time
	if got := p.next("a.test", at, one); got != PushbackBaseDelay {
		t.Fatalf("after a quiet time: %v, want the base %v again", got, PushbackBaseDelay)
	}
	p.next("b.test", at, one)
	at = at.Add(2 * PushbackForgiveAfter)
	p.next("c.test", at, one)
	if _, ok := p.m["a.test"]; ok || len(p.m) != 1 {
		t.Fatalf("after two quiet times the table holds %v, want c.test alone", p.m)
	}
}

// TestQueuePushback: a 429 or 503 without Retry-After holds the whole domain by the
// curve (the jitter comes from Config.Jitter, fixed here), not other domains; a second one
// doubles the hold.
func TestQueuePushback(t *testing.T) {
	for _, status := range []int{429, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			s := embeddedtest.Open(t, t.TempDir())
			clk := clocktest.NewFake(queueStart)
			q := openRetryQueue(t, s, clk) // jitter 0.5: holds of 3.75 s, then 7.5 s
			res := submit(t, q, downloader.Task{URL: "http://a.test/1"}, downloader.Task{URL: "http://b.test/1"})
			lease(t, q, 2)
			if err := q.Report(t.Context(), statusReport(res[0].TaskID, clk.Now(), status, nil)); err != nil {
				t.Fatal(err)
			}
			submit(t, q, downloader.Task{URL: "http://a.test/2"}, downloader.Task{URL: "http://b.test/2"})
			if got := urls(lease(t, q, 5)); len(got) != 1 || got[0] != "http://b.test/2" {
				t.Fatalf("during a.test's hold leased %v, want b.test/2 alone", got)
			}
			// The queue hands a task out its Lookahead (1 ms here) before it is due.
			clk.Advance(3750*time.Millisecond - 2*time.Millisecond)
			if got := lease(t, q, 5); len(got) != 0 {
				t.Fatalf("leased %v before the hold's end", urls(got))
			}
			clk.Advance(time.Millisecond)
			got := lease(t, q, 5)
			if len(got) != 2 {
				t.Fatalf("at the hold's end leased %v, want a.test's two tasks", urls(got))
			}
			if err := q.Report(t.Context(), statusReport(got[0].TaskID, clk.Now(), status, nil)); err != nil {
				t.Fatal(err)
			}
			if err := q.Report(t.Context(), okReport(got[1].TaskID, clk.Now(), "")); err != nil {
				t.Fatal(err)
			}
			submit(t, q, downloader.Task{URL: "http://a.test/3"})
			clk.Advance(7500*time.Millisecond - 2*time.Millisecond)
			if got := lease(t, q, 5); len(got) != 0 {
				t.Fatalf("leased %v before the second, doubled hold's end", urls(got))
			}
			clk.Advance(time.Millisecond)
			if got := lease(t, q, 5); len(got) == 0 {
				t.Fatalf("nothing leased at the second hold's end")
			}
		})
	}
}

// TestQueueRetryAfterSaturates: a Retry-After too large to count (20 digits, past what a
// time.Duration holds in seconds) is the longest wait the service honours: no task of the
// domain is leased, so no request is made, before it; then the task comes back.
func TestQueueRetryAfterSaturates(t *testing.T) {
	parsed := retryafter.Seconds("18446744073709551616", queueStart)
	for name, secs := range map[string]int64{
		"20 digits as parsed":        *parsed,
		"past a Duration in seconds": 18446744074,
		"largest int64":              math.MaxInt64,
	} {
		t.Run(name, func(t *testing.T) {
			s := embeddedtest.Open(t, t.TempDir())
			clk := clocktest.NewFake(queueStart)
			q := openRetryQueue(t, s, clk)
			res := submit(t, q, downloader.Task{URL: "http://a.test/1"}, downloader.Task{URL: "http://a.test/2"})
			lease(t, q, 1)
			if err := q.Report(t.Context(), statusReport(res[0].TaskID, clk.Now(), 503, &secs)); err != nil {
				t.Fatal(err)
			}
			// Look every minute of the hour, and just before its end.
			for range 59 {
				clk.Advance(time.Minute)
				if got := lease(t, q, 5); len(got) != 0 {
					t.Fatalf("leased %v %v after a Retry-After of %d s, before the longest wait %v",
						urls(got), clk.Now().Sub(queueStart), secs, retryafter.MaxWait)
				}
			}
			// The queue hands a task out its Lookahead (1 ms here) before it is due; the
			// limiter holds the request itself until the wait is over (engine tests).
			clk.Advance(time.Minute - 2*time.Millisecond)
			if got := lease(t, q, 5); len(got) != 0 {
				t.Fatalf("leased %v before the longest wait", urls(got))
			}
			clk.Advance(time.Millisecond)
			if got := lease(t, q, 5); len(got) == 0 {
				t.Fatalf("nothing leased once the longest wait passed")
			}
			if rec := taskRecord(t, q, res[0].TaskID); rec.AttemptCount != 1 {
				t.Fatalf("attempt_count %d, want 1", rec.AttemptCount)
			}
		})
	}
}

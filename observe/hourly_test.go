package observe

import (
	"downloader/clock/clocktest"
	"testing"
	"time"

	"downloader"
)

func TestHours(t *testing.T) {
	clk := clocktest.NewFake(t0.Add(30 * time.Minute)) // 07:30
	o := New(Config{Clock: clk})
	hours := o.Hours(clk.Now())
	if len(hours) != HourBuckets || !hours[HourBuckets-1].StartAt.Equal(t0) || !hours[0].StartAt.Equal(t0.Add(-23*time.Hour)) {
		t.Fatalf("empty window: %d hours from %v to %v", len(hours), hours[0].StartAt, hours[len(hours)-1].StartAt)
	}
	// 07:30: two renders (100 and 300 ms), a plain fetch, a refused render, two probes
	// (one refused by our limiter); 09:10: one render of 50 ms.
	o.Observe(renderProbe(finished(entryB, 100*time.Millisecond, "")))
	o.Observe(renderProbe(finished(entryA, 300*time.Millisecond, "")))
	o.Observe(finished(entryA, 20*time.Millisecond, ""))
	o.Observe(refused(entryB, downloader.FailSelfRateLimited))
	o.Observe(finished(entryC, 10*time.Millisecond, ""))
	o.Observe(refused(entryC, downloader.FailSelfRateLimited))
	clk.Set(t0.Add(2*time.Hour + 10*time.Minute))
	o.Observe(renderProbe(finished(entryB, 50*time.Millisecond, "")))

	hours = o.Hours(clk.Now())
	if len(hours) != HourBuckets {
		t.Fatalf("%d hours", len(hours))
	}
	at := func(start time.Time) Hour {
		for _, h := range hours {
			if h.StartAt.Equal(start) {
				return h
			}
		}
		t.Fatalf("no hour starting %v", start)
		return Hour{}
	}
	h7, h8, h9 := at(t0), at(t0.Add(time.Hour)), at(t0.Add(2*time.Hour))
	if h7.RequestCount != 6 || h7.OverLimitCount != 2 || h7.ProbeReachedCount != 1 || h7.ProbeNotReachedCount != 1 ||
		h7.RenderCount != 2 || h7.MeanRenderMs == nil || *h7.MeanRenderMs != 200 {
		t.Errorf("07:00 %+v", h7)
	}
	if h8.RequestCount != 0 || h8.MeanRenderMs != nil {
		t.Errorf("08:00 (empty) %+v", h8)
	}
	if h9.RequestCount != 1 || h9.RenderCount != 1 || *h9.MeanRenderMs != 50 || hours[HourBuckets-1] != h9 {
		t.Errorf("09:00 %+v, newest %+v", h9, hours[HourBuckets-1])
	}
	// The sums equal the 24 h counts.
	var req, over uint64
	for _, h := range hours {
		req += h.RequestCount
		over += h.OverLimitCount
	}
	if c := o.Counts(clk.Now()); req != c.Request24hCount || over != c.OverLimit24hCount {
		t.Errorf("hours sum to %d requests and %d over limit; the 24 h counts are %d and %d", req, over, c.Request24hCount, c.OverLimit24hCount)
	}
	// A day later 07:00 has left the window.
	if h := o.Hours(t0.Add(24 * time.Hour))[0]; !h.StartAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("the oldest hour a day later starts %v", h.StartAt)
	}
}

package engine

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/egress"
	"downloader/limiter"
)

// refusingFetcher: every connection is refused, as when our own uplink is gone.
type refusingFetcher struct{}

func (refusingFetcher) FetchWith(ctx context.Context, u *url.URL, adm *limiter.Admission, _ limiter.HopAdmitter, _ downloader.FetchOptions) *downloader.Outcome {
	return downloader.Failed(downloader.FailConnectRefused)
}

// TestEgressJudgesEveryEntry: with an egress detector wired in, network failures on many
// distinct domains at once come out as egress_unavailable, has_reached_origin=false, in
// the answers of B and C and in entry A's reports and stored results alike; the detector
// is told each outcome's entry (a failing probe is no evidence).
func TestEgressJudgesEveryEntry(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
	lim := limiter.New(clk)
	clk.Advance(time.Hour)
	res := &recordingResults{}
	det := egress.New(egress.Config{Clock: clk, MinDomainCount: 3})
	e := New(Config{Clock: clk, Limiter: lim, Gate: limiter.NewGate(8, 8), Fetcher: refusingFetcher{}, Results: res,
		Egress: det, DefaultMinInterval: time.Second, DefaultTimeout: 10 * time.Second})
	ctx := context.Background()
	req := func(i int) (downloader.Request, *url.URL) {
		u, _ := url.Parse(fmt.Sprintf("http://d%d.test/", i))
		return downloader.Request{URL: u.String(), Domain: u.Hostname(), IntervalSource: downloader.IntervalSourceRequest}, u
	}
	// A probe's failure is no evidence (the scheduler probes domains that failed).
	r, u := req(100)
	if s := e.Probe(ctx, r, u); s.FailReason == nil || *s.FailReason != downloader.FailConnectRefused || !s.HasReachedOrigin {
		t.Fatalf("probe: %+v, want connect_refused, reached", s)
	}
	for i := range 2 { // below the count: the sites' problem
		r, u := req(i)
		rr, err := e.Render(ctx, r, u)
		if err != nil || rr.Summary.FailReason == nil || *rr.Summary.FailReason != downloader.FailConnectRefused || !rr.Summary.HasReachedOrigin {
			t.Fatalf("entry B on domain %d: %+v %v, want connect_refused, reached", i, rr, err)
		}
	}
	r, u = req(2)
	rr, err := e.Render(ctx, r, u)
	if err != nil || rr.Summary.FailReason == nil || *rr.Summary.FailReason != downloader.FailEgressUnavailable || rr.Summary.HasReachedOrigin {
		t.Fatalf("entry B on the third domain: %+v %v, want egress_unavailable, not reached", rr, err)
	}
	r, u = req(3)
	s := e.Probe(ctx, r, u)
	if s.FailReason == nil || *s.FailReason != downloader.FailEgressUnavailable || s.HasReachedOrigin {
		t.Fatalf("entry C while down: %+v, want egress_unavailable, not reached", s)
	}
	out := runAndStore(t, ctx, e, &downloader.Task{TaskID: "t1", URL: "http://d4.test/", MinIntervalMs: ms(0)})
	if out.Report == nil || out.Report.FailReason == nil || *out.Report.FailReason != downloader.FailEgressUnavailable || out.Report.HasReachedOrigin {
		t.Fatalf("entry A: %+v, want a report with egress_unavailable", out)
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	if n := len(res.rs); n != 1 || res.rs[0].HasReachedOrigin || *res.rs[0].FailReason != downloader.FailEgressUnavailable {
		t.Fatalf("stored results %+v, want the task's, with egress_unavailable", res.rs)
	}
}

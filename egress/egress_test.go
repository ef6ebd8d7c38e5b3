package egress

import (
	"context"
	"downloader/clock/clocktest"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"downloader"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC)

const (
	refused = downloader.FailConnectRefused
	timeout = downloader.FailConnectTimeout
	reset   = downloader.FailConnectionReset
	dnsDown = downloader.FailResolverUnavailable
	egress  = downloader.FailEgressUnavailable
	ok      = downloader.FailReason("")
)

// step is one outcome fed to the detector, at an offset from t0.
type step struct {
	at          time.Duration
	domain      string
	reason      downloader.FailReason
	hasResponse bool
	want        downloader.FailReason
	entry       downloader.Entry // default entry A
}

// failing returns n steps of reason on distinct domains d<from>..., at at, each expected
// to keep its reason unless want is set.
func failing(at time.Duration, from, n int, reason, want downloader.FailReason) []step {
	var out []step
	for i := from; i < from+n; i++ {
		w := want
		if w == "" {
			w = reason
		}
		out = append(out, step{at: at, domain: fmt.Sprintf("d%d.test", i), reason: reason, want: w})
	}
	return out
}

func working(at time.Duration, from, n int) []step {
	var out []step
	for i := from; i < from+n; i++ {
		out = append(out, step{at: at, domain: fmt.Sprintf("w%d.test", i), reason: ok, hasResponse: true, want: ok})
	}
	return out
}

// probes makes steps entry C's.
func probes(steps []step) []step {
	for i := range steps {
		steps[i].entry = downloader.EntryProbe
	}
	return steps
}

func concat(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestJudgeWithoutCanary runs the rule on the fake clock (Window 30 s, 4 domains, 80 %).
func TestJudgeWithoutCanary(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"one site down is the site's problem",
			concat(working(0, 0, 10), failing(time.Second, 0, 1, refused, ""),
				// the same dead site tried again and again is still one domain
				[]step{{at: 2 * time.Second, domain: "d0.test", reason: refused, want: refused},
					{at: 3 * time.Second, domain: "d0.test", reason: refused, want: refused},
					{at: 4 * time.Second, domain: "d0.test", reason: timeout, want: timeout}})},
		{"many distinct domains failing at once is ours",
			concat(failing(0, 0, 3, refused, ""), // below the count: blamed on the sites
				failing(time.Second, 3, 1, timeout, egress), // the 4th tips it over
				failing(2*time.Second, 4, 3, reset, egress),
				// resolver failures count but keep their own, more precise, reason
				failing(2*time.Second, 7, 1, dnsDown, dnsDown))},
		{"a large share working means the sites are failing, not us",
			concat(working(0, 0, 6), failing(time.Second, 0, 6, refused, ""))},
		{"the share is over distinct domains in the window",
			concat(working(0, 0, 2), failing(time.Second, 0, 7, refused, ""), // 7 of 9 = 78 %
				failing(time.Second, 7, 1, refused, egress))}, // 8 of 10 = 80 %
		{"old outcomes leave the window",
			concat(failing(0, 0, 3, refused, ""),
				failing(31*time.Second, 3, 1, refused, ""), // the first three have expired
				failing(32*time.Second, 4, 2, refused, ""),
				failing(33*time.Second, 6, 1, refused, egress))},
		{"recovery: domains answering again end it",
			concat(failing(0, 0, 3, refused, ""), failing(0, 3, 2, refused, egress),
				[]step{{at: time.Second, domain: "x.test", reason: refused, want: egress}},
				// three of the failing domains answer again: 3 failing of 6 seen, then 4 of 7
				[]step{{at: 2 * time.Second, domain: "d0.test", hasResponse: true, reason: downloader.FailHTTPStatusError, want: downloader.FailHTTPStatusError},
					{at: 2 * time.Second, domain: "d1.test", want: ok, hasResponse: true},
					{at: 2 * time.Second, domain: "d2.test", want: ok, hasResponse: true},
					{at: 3 * time.Second, domain: "y.test", reason: timeout, want: timeout}})},
		{"our own reasons say nothing about the network",
			concat(failing(0, 0, 3, refused, ""),
				failing(time.Second, 10, 5, downloader.FailSelfRateLimited, ""),
				failing(time.Second, 20, 5, downloader.FailRendererCrashed, ""),
				failing(time.Second, 30, 2, downloader.FailShuttingDown, ""),
				failing(2*time.Second, 3, 1, refused, egress))},
		{"an answer with a broken body proves the path works",
			concat(failing(0, 0, 3, refused, ""),
				[]step{{at: time.Second, domain: "d3.test", reason: reset, hasResponse: true, want: reset}},
				failing(2*time.Second, 4, 1, refused, egress))}, // 4 failing of 5: 80 %
		{"failing probes are no evidence: a recovery round is not our outage",
			concat(probes(failing(0, 0, 20, refused, "")), failing(time.Second, 100, 3, timeout, ""))},
		{"... but probes that work are, and failing probes are ours while down",
			concat(probes(working(0, 0, 1)), failing(0, 0, 3, refused, ""),
				failing(time.Second, 3, 1, refused, egress), // 4 of 5
				probes(failing(2*time.Second, 10, 2, reset, egress)))},
		{"NXDOMAIN and TLS failures are answers from the other side",
			concat(failing(0, 0, 4, downloader.FailDomainNotFound, ""),
				failing(0, 10, 4, downloader.FailTLSFailed, ""),
				failing(time.Second, 20, 3, refused, ""))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.NewFake(t0)
			d := New(Config{Clock: clk, Window: 30 * time.Second, MinDomainCount: 4, MinFailingShare: 0.8})
			for i, s := range tt.steps {
				clk.Set(t0.Add(s.at))
				entry := s.entry
				if entry == "" {
					entry = downloader.EntryLease
				}
				if got := d.Judge(clk.Now(), s.domain, entry, s.reason, s.hasResponse); got != s.want {
					st := d.Status(clk.Now())
					t.Fatalf("step %d (%+v): got %q, want %q; status %+v", i, s, got, s.want, st)
				}
			}
		})
	}
}

func TestStatusAndMemoryBound(t *testing.T) {
	clk := clocktest.NewFake(t0)
	d := New(Config{Clock: clk, Window: 10 * time.Second, MinDomainCount: 3})
	for i := range 1000 {
		clk.Advance(100 * time.Millisecond)
		d.Judge(clk.Now(), fmt.Sprintf("d%d.test", i%300), downloader.EntryLease, refused, false)
	}
	st := d.Status(clk.Now())
	if !st.IsDown || st.FailingDomainCount != 100 || st.SeenDomainCount != 100 {
		t.Fatalf("status %+v, want down with the 100 domains of the last 10 s", st)
	}
	if !st.DownSinceAt.Equal(t0.Add(300 * time.Millisecond)) {
		t.Errorf("down_since_at %v, want the third failure", st.DownSinceAt)
	}
	d.mu.Lock()
	n := len(d.events)
	d.mu.Unlock()
	if n > 200 {
		t.Errorf("%d events kept for a 10 s window of 100 outcomes: expiry does not compact", n)
	}
	clk.Advance(11 * time.Second)
	if st := d.Status(clk.Now()); st.IsDown || st.SeenDomainCount != 0 || st.FailingDomainCount != 0 {
		t.Errorf("after the window: %+v, want empty and up", st)
	}
	if len(d.domains) != 0 {
		t.Errorf("%d domains kept after the window", len(d.domains))
	}
}

// TestCanary: a working canary vetoes, a failing one lowers the bar, a stale one is
// ignored.
func TestCanary(t *testing.T) {
	clk := clocktest.NewFake(t0)
	var canaryErr atomic.Pointer[error]
	setCanary := func(err error) { canaryErr.Store(&err) }
	setCanary(nil)
	d := New(Config{Clock: clk, Window: 30 * time.Second, MinDomainCount: 4, MinFailingShare: 0.8,
		CanaryInterval: 10 * time.Second, CanaryMinDomainCount: 2,
		Canary: func(ctx context.Context) error { return *canaryErr.Load() }})
	ctx := context.Background()

	// The canary answers: eight dead sites are the sites' problem.
	d.CheckCanary(ctx)
	for i := range 8 {
		if got := d.Judge(clk.Now(), fmt.Sprintf("a%d.test", i), downloader.EntryLease, refused, false); got != refused {
			t.Fatalf("canary working: got %q for a%d", got, i)
		}
	}
	// The canary fails: two failing domains are enough.
	clk.Advance(time.Minute) // clear the window
	setCanary(errors.New("connect: network is unreachable"))
	d.CheckCanary(ctx)
	if got := d.Judge(clk.Now(), "b0.test", downloader.EntryLease, timeout, false); got != timeout {
		t.Fatalf("first failure with the canary failing: got %q", got)
	}
	// A failing probe counts towards the canary's bar.
	if got := d.Judge(clk.Now(), "b1.test", downloader.EntryProbe, timeout, false); got != egress {
		t.Fatalf("second failure (a probe) with the canary failing: got %q, want egress_unavailable", got)
	}
	// ... but a site that answers still answers.
	if got := d.Judge(clk.Now(), "b2.test", downloader.EntryRender, ok, true); got != ok {
		t.Fatalf("success while down: got %q", got)
	}
	// The canary result goes stale: back to the plain rule (2 failing of 3 is not enough).
	clk.Advance(21 * time.Second)
	if got := d.Judge(clk.Now(), "b3.test", downloader.EntryLease, timeout, false); got != timeout {
		t.Fatalf("stale canary: got %q, want the plain rule", got)
	}
	st := d.Status(clk.Now())
	if !st.HasCanary || st.IsCanaryOK || st.CanaryError == "" {
		t.Errorf("status %+v", st)
	}
}

// TestRunChecksTheCanary: Run checks on its interval on the fake clock, and at once when
// the window suspects an outage.
func TestRunChecksTheCanary(t *testing.T) {
	clk := clocktest.NewFake(t0)
	checks := make(chan struct{}, 16)
	d := New(Config{Clock: clk, Window: 30 * time.Second, MinDomainCount: 2, CanaryInterval: 10 * time.Second,
		Canary: func(ctx context.Context) error { checks <- struct{}{}; return errors.New("down") }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	<-checks // the first check, at start
	clk.WaitTimers(1)
	clk.Advance(10 * time.Second)
	<-checks // on the interval
	clk.WaitTimers(1)
	clk.Advance(25 * time.Second) // the result is stale now, and the timer fired
	<-checks
	clk.WaitTimers(1)
	clk.Advance(21 * time.Second) // stale again, timer 4 s from firing
	// Two failing domains: suspected; the canary is stale, so Run checks at once.
	d.Judge(clk.Now(), "a.test", downloader.EntryLease, refused, false)
	d.Judge(clk.Now(), "b.test", downloader.EntryRender, refused, false)
	<-checks
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestDefaults(t *testing.T) {
	d := New(Config{MinFailingShare: 7})
	if d.cfg.Window != DefaultWindow || d.cfg.MinDomainCount != DefaultMinDomainCount ||
		d.cfg.MinFailingShare != DefaultMinFailingShare || d.cfg.CanaryInterval != DefaultCanaryInterval {
		t.Errorf("defaults not applied: %+v", d.cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Run(ctx); err != nil { // no canary: waits for ctx
		t.Fatal(err)
	}
}

// BenchmarkJudge: the detector sits on every request's path.
func BenchmarkJudge(b *testing.B) {
	clk := clocktest.NewFake(t0)
	d := New(Config{Clock: clk})
	domains := make([]string, 4096)
	for i := range domains {
		domains[i] = fmt.Sprintf("d%d.test", i)
	}
	now := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Millisecond)
		d.Judge(now, domains[i%len(domains)], downloader.EntryLease, ok, true)
	}
}

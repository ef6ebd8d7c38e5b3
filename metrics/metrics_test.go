package metrics

import (
	"io"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/limiter"
	"downloader/observe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC)

func event(e downloader.Entry, render bool, reason downloader.FailReason, overLimit bool, d time.Duration) *downloader.Event {
	out := &downloader.Outcome{FailReason: reason}
	if reason == "" {
		out.HTTPStatus = 200
	}
	ev := &downloader.Event{Entry: e, Domain: "a.test", URL: "http://a.test/", ShouldRender: render,
		OverLimit: overLimit, Duration: d}
	if e != downloader.EntryLease || !overLimit {
		ev.Summary = out.Summary("a.test")
	}
	return ev
}

// value returns the value of the series of name with exactly the labels given.
func value(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("%s has no series %v", name, labels)
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	if len(m.GetLabel()) != len(want) {
		return false
	}
	for _, l := range m.GetLabel() {
		if want[l.GetName()] != l.GetValue() {
			return false
		}
	}
	return true
}

func TestCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Sources{})
	if err != nil {
		t.Fatal(err)
	}
	events := []*downloader.Event{
		event(downloader.EntryProbe, false, "", false, 20*time.Millisecond),
		event(downloader.EntryProbe, false, "", false, 40*time.Millisecond),
		event(downloader.EntryProbe, true, downloader.FailRenderTimeout, false, 3*time.Second),
		event(downloader.EntryProbe, false, downloader.FailSelfRateLimited, true, 0),
		event(downloader.EntryRender, true, downloader.FailLocalQueueFull, true, 0),
		event(downloader.EntryRender, true, downloader.FailHTTPStatusError, false, 2*time.Second),
		event(downloader.EntryLease, false, "", true, 0), // a delay: an over-limit event, not a request
		event(downloader.EntryLease, false, "", false, 100*time.Millisecond),
		{Entry: downloader.EntryLease, Domain: "a.test", Paced: true, Delay: time.Second}, // the local queue's pacing
	}
	for _, ev := range events {
		m.Observe(ev)
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"downloader_probes_total", map[string]string{"should_render": "false", "has_reached_origin": "true", "fail_reason": "none"}, 2},
		{"downloader_probes_total", map[string]string{"should_render": "true", "has_reached_origin": "false", "fail_reason": "render_timeout"}, 1},
		{"downloader_probes_total", map[string]string{"should_render": "false", "has_reached_origin": "false", "fail_reason": "self_rate_limited"}, 1},
		{"downloader_probes_total", map[string]string{"should_render": "true", "has_reached_origin": "true", "fail_reason": "none"}, 0},
		{"downloader_requests_total", map[string]string{"entry": "c", "should_render": "false", "has_reached_origin": "true", "fail_reason": "none"}, 2},
		{"downloader_requests_total", map[string]string{"entry": "b", "should_render": "true", "has_reached_origin": "false", "fail_reason": "local_queue_full"}, 1},
		{"downloader_requests_total", map[string]string{"entry": "b", "should_render": "true", "has_reached_origin": "true", "fail_reason": "http_status_error"}, 1},
		{"downloader_requests_total", map[string]string{"entry": "a", "should_render": "false", "has_reached_origin": "true", "fail_reason": "none"}, 1},
		{"downloader_over_limit_total", map[string]string{"entry": "a", "fail_reason": "self_rate_limited"}, 1},
		{"downloader_over_limit_total", map[string]string{"entry": "b", "fail_reason": "local_queue_full"}, 1},
		{"downloader_over_limit_total", map[string]string{"entry": "c", "fail_reason": "self_rate_limited"}, 1},
		{"downloader_over_limit_total", map[string]string{"entry": "c", "fail_reason": "local_queue_full"}, 0},
		{"downloader_paced_total", map[string]string{"entry": "a"}, 1},
		{"downloader_paced_total", map[string]string{"entry": "b"}, 0},
		{"downloader_fetch_duration_seconds", map[string]string{"entry": "c"}, 2},
		{"downloader_fetch_duration_seconds", map[string]string{"entry": "a"}, 1},
		{"downloader_render_duration_seconds", map[string]string{"entry": "c"}, 1},
		{"downloader_render_duration_seconds", map[string]string{"entry": "b"}, 1},
	}
	for _, tt := range tests {
		if got := value(t, reg, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

func TestLiveValues(t *testing.T) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	now := t0.Add(2 * time.Hour)
	clk.Set(now)
	for _, d := range []string{"a.test", "b.test", "c.test"} {
		a, _ := lim.Allow(now, d, time.Second, downloader.IntervalSourceRequest, downloader.EntryRender)
		a.Done()
	}
	gate := limiter.NewGate(8, 4)
	for range 2 {
		if !gate.TryAcquire() {
			t.Fatal("gate")
		}
	}
	restarts := 3
	reg := prometheus.NewRegistry()
	_, err := New(reg, Sources{Clock: clk, Gate: gate, Domains: observe.NewDomainTable(lim, time.Second),
		Renderer: func() downloader.RendererStats {
			return downloader.RendererStats{SlotCount: 2, EffectiveSlotCount: 1, IsAdaptive: true, BusyCount: 1, QueuedCount: 5, RestartCount: restarts, IsBrowserUp: true,
				RendererKind: "obscura", IsGuardRefused: true}
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"downloader_in_flight_count": 2, "downloader_max_concurrent_count": 8, "downloader_instance_max_concurrent_count": 8,
		"downloader_queued_count": 0,
		"downloader_domain_count": 3, "downloader_active_domain_count": 3,
		"downloader_renderer_restarts_total": 3, "downloader_renderer_busy_count": 1, "downloader_renderer_queued_count": 5,
		"downloader_renderer_slot_count": 2, "downloader_renderer_effective_slot_count": 1, "downloader_renderer_is_up": 1,
	}
	for name, w := range want {
		if got := value(t, reg, name, nil); got != w {
			t.Errorf("%s = %v, want %v", name, got, w)
		}
	}
	if got := value(t, reg, "downloader_renderer_is_guard_refused", map[string]string{"renderer_kind": "obscura"}); got != 1 {
		t.Errorf("downloader_renderer_is_guard_refused{renderer_kind=obscura} = %v, want 1", got)
	}
	gate.SetCapacity(16)
	restarts = 4
	if got := value(t, reg, "downloader_max_concurrent_count", nil); got != 16 {
		t.Errorf("cap after a change: %v", got)
	}
	if got := value(t, reg, "downloader_renderer_restarts_total", nil); got != 4 {
		t.Errorf("restarts: %v", got)
	}
	if got := value(t, reg, "downloader_instance_max_concurrent_count", nil); got != 16 {
		t.Errorf("instance cap after a change: %v", got)
	}
	// Ten minutes later nothing is active any more; the domains are still in the table.
	clk.Set(now.Add(10 * time.Minute))
	if got := value(t, reg, "downloader_active_domain_count", nil); got != 0 {
		t.Errorf("active domains after 10 minutes: %v", got)
	}
}

// TestClusterAndEgressValues: in cluster mode downloader_max_concurrent_count is the
// cluster-wide setting and downloader_instance_max_concurrent_count this instance's share
// (its gate); the egress detector's state is a 0/1 gauge and a count.
func TestClusterAndEgressValues(t *testing.T) {
	gate := limiter.NewGate(4, 4) // this instance's share of 12 over three instances
	cluster := 12
	eg := downloader.EgressState{}
	reg := prometheus.NewRegistry()
	_, err := New(reg, Sources{Gate: gate, MaxConcurrentCount: func() int { return cluster },
		Egress: func() downloader.EgressState { return eg }})
	if err != nil {
		t.Fatal(err)
	}
	check := func(want map[string]float64) {
		t.Helper()
		for name, w := range want {
			if got := value(t, reg, name, nil); got != w {
				t.Errorf("%s = %v, want %v", name, got, w)
			}
		}
	}
	check(map[string]float64{"downloader_max_concurrent_count": 12, "downloader_instance_max_concurrent_count": 4,
		"downloader_egress_is_unavailable": 0, "downloader_egress_failing_domain_count": 0})
	cluster, eg = 30, downloader.EgressState{IsUnavailable: true, FailingDomainCount: 7}
	gate.SetCapacity(10)
	check(map[string]float64{"downloader_max_concurrent_count": 30, "downloader_instance_max_concurrent_count": 10,
		"downloader_egress_is_unavailable": 1, "downloader_egress_failing_domain_count": 7})
}

// TestFenceValues: downloader_instance_is_fenced has one series per fence reason, 1 on
// the current reason while fenced and 0 everywhere else; without a source, no series.
func TestFenceValues(t *testing.T) {
	var st downloader.FenceState
	reg := prometheus.NewRegistry()
	if _, err := New(reg, Sources{Fence: func() downloader.FenceState { return st }}); err != nil {
		t.Fatal(err)
	}
	for _, cur := range []downloader.FenceState{{}, {IsFenced: true, FenceReason: downloader.FenceHeartbeatLate},
		{IsFenced: true, FenceReason: downloader.FenceClockSkewed}, {IsFenced: true, FenceReason: downloader.FenceInstanceIDTakenOver}, {}} {
		st = cur
		for _, r := range downloader.FenceReasons() {
			want := 0.0
			if cur.IsFenced && cur.FenceReason == r {
				want = 1
			}
			if got := value(t, reg, "downloader_instance_is_fenced", map[string]string{"fence_reason": r}); got != want {
				t.Errorf("fence %+v: downloader_instance_is_fenced{fence_reason=%q} = %v, want %v", cur, r, got, want)
			}
		}
	}
	none := prometheus.NewRegistry()
	if _, err := New(none, Sources{}); err != nil {
		t.Fatal(err)
	}
	mfs, err := none.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "downloader_instance_is_fenced" {
			t.Error("a fence metric without a fence source")
		}
	}
}

// TestHandlerAndLint scrapes /metrics on a fresh registry and runs promlint over it.
func TestHandlerAndLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Sources{Gate: limiter.NewGate(4, 4), Renderer: func() downloader.RendererStats { return downloader.RendererStats{} },
		Fence: func() downloader.FenceState { return downloader.FenceState{} }})
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(event(downloader.EntryProbe, false, "", false, time.Millisecond))
	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, s := range []string{
		`downloader_probes_total{fail_reason="none",has_reached_origin="true",should_render="false"} 1`,
		"# TYPE downloader_fetch_duration_seconds histogram",
		"# TYPE downloader_renderer_restarts_total counter",
		"downloader_max_concurrent_count 4",
		"downloader_instance_max_concurrent_count 4",
		`downloader_instance_is_fenced{fence_reason="clock_skewed"} 0`,
	} {
		if !strings.Contains(text, s) {
			t.Errorf("scrape lacks %q", s)
		}
	}

	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range problems {
		// A gauge named like its JSON field (in_flight_count): see the package comment.
		if strings.Contains(p.Text, `"_count" suffix`) {
			continue
		}
		left = append(left, p.Metric+": "+p.Text)
	}
	sort.Strings(left)
	if len(left) > 0 {
		t.Errorf("promlint:\n%s", strings.Join(left, "\n"))
	}
}

func TestRegisterTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, Sources{}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg, Sources{}); err == nil {
		t.Error("a second New on one registry must fail, not panic or double count")
	}
}

// TestLocalQueueValues: the local queue's counts are gauges under their JSON names, the
// retries a counter; without a queue (a scheduler) none is sent.
func TestLocalQueueValues(t *testing.T) {
	for _, hasQueue := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		c := observe.QueueCounts{PendingCount: 5, LeasedCount: 2, DoneCount: 12, SucceededCount: 10, FailedCount: 2, SkippedCount: 3, RetryCount: 4, PageCount: 9}
		if _, err := New(reg, Sources{LocalQueue: func() (observe.QueueCounts, bool) { return c, hasQueue }}); err != nil {
			t.Fatal(err)
		}
		want := map[string]float64{"downloader_local_queue_pending_count": 5, "downloader_local_queue_leased_count": 2,
			"downloader_local_queue_done_count": 12, "downloader_local_queue_succeeded_count": 10, "downloader_local_queue_failed_count": 2,
			"downloader_local_queue_skipped_count": 3, "downloader_local_queue_retries_total": 4, "downloader_local_queue_page_count": 9}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				switch {
				case m.GetGauge() != nil:
					got[f.GetName()] = m.GetGauge().GetValue()
				case m.GetCounter() != nil && len(m.GetLabel()) == 0:
					got[f.GetName()] = m.GetCounter().GetValue()
				}
			}
		}
		for name, w := range want {
			v, ok := got[name]
			if hasQueue && (!ok || v != w) {
				t.Errorf("%s = %v (%v), want %v", name, v, ok, w)
			}
			if !hasQueue && ok {
				t.Errorf("%s sent without a local queue", name)
			}
		}
	}
}

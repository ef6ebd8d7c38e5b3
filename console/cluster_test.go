package console

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/egress"
	"downloader/engine"
	"downloader/internal/testkit"
	"downloader/limiter"
	"downloader/observe"
	"downloader/server"
)

// TestRuntimeShowsInstancesAndEgress: in cluster mode the runtime page and its JSON list
// the instances (a failed read is shown, not fatal); the egress detector's state is shown
// with the moment it went down and the failing domains. On the embedded store the page
// says so and the JSON has no cluster.
func TestRuntimeShowsInstancesAndEgress(t *testing.T) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	clk.Advance(2 * time.Hour)
	off := int64(-3)
	fc := &testkit.Cluster{InstanceList: []downloader.ClusterInstance{
		{InstanceID: "dl-1", Address: "10.0.0.1:8080", LastHeartbeatAt: clk.Now().UTC(), IsLive: true, InFlightCount: 3, CapacityShareCount: 6, ClockOffsetMs: &off},
		{InstanceID: "dl-2", Address: "10.0.0.2:8080", LastHeartbeatAt: clk.Now().UTC(), IsLive: true, CapacityShareCount: 6,
			IsFenced: true, FenceReason: downloader.FenceClockSkewed},
		{InstanceID: "dl-3", LastHeartbeatAt: clk.Now().Add(-30 * time.Second).UTC(), IsFenced: true, FenceReason: downloader.FenceHeartbeatLate},
	}}
	det := egress.New(egress.Config{Clock: clk, MinDomainCount: 3})
	down := clk.Now()
	for i := range 3 {
		det.Judge(clk.Now(), fmt.Sprintf("d%d.test", i), downloader.EntryRender, downloader.FailConnectTimeout, false)
	}
	obs := observe.New(observe.Config{Clock: clk})
	gate := limiter.NewGate(6, 4)
	eng := engine.New(engine.Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: fetcher{clk},
		Observer: obs, Shared: fc, Egress: det, DefaultMinInterval: time.Second})
	egressOf := func(now time.Time) (downloader.EgressState, bool) { return det.Status(now).EgressState(), true }
	con, err := New(Config{Clock: clk, Settings: eng, Limiter: lim, Gate: gate, Cluster: fc, Egress: egressOf, Observer: obs,
		Domains: observe.NewDomainTable(lim, time.Nanosecond), Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{Probe: eng, Render: eng, Settings: eng, Domains: lim, Slots: gate, Cluster: fc, Egress: egressOf,
		Clock: clk, Extra: con.Register})
	h := &harness{clk: clk, eng: eng, lim: lim, gate: gate, obs: obs, srv: httptest.NewServer(srv)}
	t.Cleanup(h.srv.Close)

	var rt Runtime
	if code := h.getJSON(t, "/v1/console/runtime", &rt); code != 200 {
		t.Fatalf("status %d", code)
	}
	if rt.Cluster == nil || rt.Cluster.InstanceID != "dl-2" || rt.Cluster.LiveInstanceCount != 2 || len(rt.Cluster.Instances) != 3 ||
		rt.MaxConcurrentCount != 12 {
		t.Fatalf("cluster = %+v, max_concurrent_count %d", rt.Cluster, rt.MaxConcurrentCount)
	}
	if rt.Egress == nil || !rt.Egress.IsUnavailable || rt.Egress.FailingDomainCount != 3 || rt.Egress.UnavailableSinceAt == nil ||
		!rt.Egress.UnavailableSinceAt.Equal(down) {
		t.Fatalf("egress = %+v; want unavailable since %v, 3 failing domains", rt.Egress, down)
	}
	_, page := h.get(t, "/")
	for _, want := range []string{
		`data-row="instance:dl-1"`, `10.0.0.1:8080`, `<td class="n" data-field="clock_offset_ms">-3</td>`,
		`data-field="live_instance_count">2<`, `data-field="egress" data-value="unavailable"`,
		`data-field="unavailable_since_at">` + ts(down), `data-field="failing_domain_count">3<`, "集群实例", "本机出口网络",
		`<td data-field="is_fenced" data-value="false" data-reason=""><span class="state normal">admitting<small>正常放行</small>`,
		`<td data-field="is_fenced" data-value="true" data-reason="clock_skewed"><span class="state down">fenced: clock off PD by more than half of max_clock_skew_ms (check NTP)<small>已隔离：时钟偏差超过`,
		`<td data-field="is_fenced" data-value="true" data-reason="heartbeat_late"><span class="state down">fenced: heartbeat late`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the runtime page lacks %q", want)
		}
	}

	// TiKV unreachable: the page still renders, with the store's message.
	fc.Set(nil, fmt.Errorf("instances: %w", errors.Join(downloader.Errorf(downloader.EUNAVAILABLE, "the cluster store (TiKV) is unavailable"), errors.New("down"))))
	resp, page := h.get(t, "/")
	if resp.StatusCode != 200 || !strings.Contains(page, `data-field="cluster_error">the cluster store (TiKV) is unavailable<`) {
		t.Errorf("page with TiKV down: %d, lacks the error", resp.StatusCode)
	}

	// The embedded store: no cluster, and the page says one machine.
	e := newHarness(t, nil)
	var one map[string]any
	e.getJSON(t, "/v1/console/runtime", &one)
	if one["cluster"] != nil || one["egress"] != nil {
		t.Errorf("embedded runtime: cluster %v, egress %v; want both null", one["cluster"], one["egress"])
	}
	if _, page := e.get(t, "/"); !strings.Contains(page, `data-field="store_backend" data-value="embedded"`) {
		t.Error("the embedded runtime page does not say one machine")
	}
}

package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/egress"
	"downloader/engine"
	"downloader/internal/testkit"
	"downloader/limiter"
)

func TestClusterOnTheEmbeddedStore(t *testing.T) {
	h := newHarness(t, &fakeFetcher{})
	started := h.clk.Now().Add(-time.Minute)
	h.srv.cfg.StartedAt = started
	h.srv.SetAddress("127.0.0.1:8080")
	h.gate.Acquire(context.Background(), limiter.QueueBounded)
	defer h.gate.Release()
	rec, m := h.do(t, "GET", "/v1/cluster", "")
	if rec.Code != 200 || m["store_backend"] != "embedded" || m["instance_id"] != "local" || m["live_instance_count"] != float64(1) ||
		m["max_concurrent_count"] != float64(4) || m["egress"] != nil {
		t.Fatalf("GET /v1/cluster: %d %v", rec.Code, m)
	}
	list, _ := m["instances"].([]any)
	if len(list) != 1 {
		t.Fatalf("instances = %v; want the local one", m["instances"])
	}
	in := list[0].(map[string]any)
	if in["instance_id"] != "local" || in["in_flight_count"] != float64(1) || in["capacity_share_count"] != float64(4) || in["is_live"] != true ||
		in["address"] != "127.0.0.1:8080" || in["started_at"] != started.UTC().Format(time.RFC3339Nano) {
		t.Errorf("local instance = %v", in)
	}
	// The domain view has no cluster part on one machine.
	h.do(t, "POST", "/v1/probe", `{"url":"http://one.test/","min_interval_ms":1000}`)
	if rec, m := h.do(t, "GET", "/v1/domains/one.test", ""); rec.Code != 200 || m["min_interval_ms"] != float64(1000) || m["cluster"] != nil {
		t.Errorf("GET /v1/domains/one.test: %d %v", rec.Code, m)
	}
}

func TestClusterMode(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
	lim := limiter.New(clk)
	clk.Advance(time.Hour)
	hb := clk.Now().Add(-300 * time.Millisecond).UTC()
	wire := clk.Now().Add(-time.Second).UTC()
	fc := &testkit.Cluster{
		InstanceList: []downloader.ClusterInstance{
			{InstanceID: "dl-1", Address: "10.0.0.1:8080", LastHeartbeatAt: hb, IsLive: true, InFlightCount: 3, CapacityShareCount: 6},
			{InstanceID: "dl-2", Address: "10.0.0.2:8080", LastHeartbeatAt: hb, IsLive: true, InFlightCount: 1, CapacityShareCount: 6},
			{InstanceID: "dl-3", LastHeartbeatAt: hb.Add(-time.Minute / 2), IsLive: false},
		},
		DomainRecords: map[string]downloader.ClusterDomain{"shared.test": {Domain: "shared.test", MinIntervalMs: 2000, IsStored: true,
			LastRequestAt: wire, LastInstanceID: "dl-1", InFlightCount: 1,
			InFlightRequests: []downloader.ClusterInFlight{{InstanceID: "dl-1", WireAt: &wire, IsInstanceLive: true}}}},
	}
	det := egress.New(egress.Config{Clock: clk, MinDomainCount: 3})
	for i := range 3 { // three distinct domains failing at network level through entry B: down
		det.Judge(clk.Now(), fmt.Sprintf("d%d.test", i), downloader.EntryRender, downloader.FailConnectTimeout, false)
	}
	gate := limiter.NewGate(6, 2)
	eng := engine.New(engine.Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: &fakeFetcher{clk: clk},
		Shared: fc, Egress: det, DefaultMinInterval: time.Second, DefaultTimeout: 5 * time.Second})
	egressOf := func(now time.Time) (downloader.EgressState, bool) { return det.Status(now).EgressState(), true }
	h := &harness{clk: clk, eng: eng, lim: lim, gate: gate, srv: New(Config{Probe: eng, Render: eng, Settings: eng,
		Domains: lim, Slots: gate, Cluster: fc, Egress: egressOf, Clock: clk})}

	rec, m := h.do(t, "GET", "/v1/cluster", "")
	if rec.Code != 200 || m["store_backend"] != "tikv" || m["instance_id"] != "dl-2" || m["live_instance_count"] != float64(2) ||
		m["max_concurrent_count"] != float64(12) {
		t.Fatalf("GET /v1/cluster: %d %v", rec.Code, m)
	}
	list, _ := m["instances"].([]any)
	if len(list) != 3 || list[0].(map[string]any)["address"] != "10.0.0.1:8080" ||
		list[0].(map[string]any)["last_heartbeat_at"] != hb.Format(time.RFC3339Nano) {
		t.Errorf("instances = %v", m["instances"])
	}
	eg, _ := m["egress"].(map[string]any)
	if eg["is_unavailable"] != true || eg["failing_domain_count"] != float64(3) || eg["unavailable_since_at"] != clk.Now().UTC().Format(time.RFC3339Nano) {
		t.Errorf("egress = %v; want unavailable since now, 3 failing domains", m["egress"])
	}

	// A domain known only to the cluster: its shared record alone.
	rec, m = h.do(t, "GET", "/v1/domains/shared.test", "")
	cl, _ := m["cluster"].(map[string]any)
	if rec.Code != 200 || cl["last_instance_id"] != "dl-1" || cl["in_flight_count"] != float64(1) || m["state"] != nil {
		t.Fatalf("GET /v1/domains/shared.test: %d %v", rec.Code, m)
	}
	if fl, _ := cl["in_flight_requests"].([]any); len(fl) != 1 || fl[0].(map[string]any)["wire_at"] != wire.Format(time.RFC3339Nano) {
		t.Errorf("in-flight entries = %v", cl["in_flight_requests"])
	}
	// Known to neither: 404.
	if rec, _ := h.do(t, "GET", "/v1/domains/nowhere.test", ""); rec.Code != 404 {
		t.Errorf("unknown domain: %d", rec.Code)
	}
	// TiKV unreachable: 503 with the store's message.
	fc.Set(fc.InstanceList, fmt.Errorf("instances: %w", errors.Join(downloader.Errorf(downloader.EUNAVAILABLE, "the cluster store (TiKV) is unavailable"), errors.New("down"))))
	if rec, m := h.do(t, "GET", "/v1/cluster", ""); rec.Code != 503 || m["error"] != "the cluster store (TiKV) is unavailable" {
		t.Errorf("GET /v1/cluster with TiKV down: %d %v", rec.Code, m)
	}
}

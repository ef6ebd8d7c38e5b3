package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"downloader/origintest"
	tikvstore "downloader/store/tikv"
	"downloader/store/tikv/tikvtest"
)

func TestClusterFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" : accepted; else a part of the error
	}{
		{nil, ""},
		{[]string{"--store", "embedded"}, ""},
		{[]string{"--store", "tikv", "--pd-endpoints", "pd1:2379, pd2:2379"}, ""},
		{[]string{"--store", "tikv"}, "--pd-endpoints"},
		{[]string{"--store", "tikv", "--pd-endpoints", "pd1"}, "host:port"},
		{[]string{"--store", "pebble"}, "--store"},
		{[]string{"--store", "tikv", "--pd-endpoints", "pd1:2379", "--max-clock-skew-ms", "-1"}, "--max-clock-skew-ms"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var c config
			fs := newFlagSet("serve", &c, io.Discard)
			err := parseFlags(fs, &c, tt.args, func(string) string { return "" })
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v; want one naming %s", err, tt.want)
			}
		})
	}
	var c config
	fs := newFlagSet("serve", &c, io.Discard)
	env := map[string]string{"DOWNLOADER_STORE": "tikv", "DOWNLOADER_PD_ENDPOINTS": "a:1,b:2"}
	if err := parseFlags(fs, &c, nil, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.Cluster.Store != storeTiKV || strings.Join(c.Cluster.PDEndpoints, " ") != "a:1 b:2" {
		t.Errorf("from the environment: %+v", c.Cluster)
	}
}

// startClusterService starts the real service (startService, as serve does) with
// --store tikv on the mock cluster c, and stops it when t ends.
func startClusterService(t *testing.T, c *tikvtest.Cluster, id string, args ...string) *testService {
	t.Helper()
	var cfg config
	all := append([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--shutdown-grace-seconds", "5",
		"--store", "tikv", "--pd-endpoints", "mock-pd:2379", "--instance-id", id}, args...) // never dialled: openTiKV is the mock
	if err := parseFlags(newFlagSet("serve", &cfg, io.Discard), &cfg, all, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	cfg.Cluster.openTiKV = func([]string, tikvstore.Options) (*tikvstore.Store, error) {
		return tikvstore.New(c.NewClient(t).KV, tikvstore.Options{})
	}
	cfg.Cluster.runtime = tikvstore.RuntimeConfig{HeartbeatInterval: 100 * time.Millisecond, InstanceTTL: time.Second, TSOLag: time.Millisecond}
	stderr := &syncBuffer{}
	svc, err := startService(context.Background(), &cfg, newLogger(stderr, slog.LevelInfo))
	if err != nil {
		t.Fatalf("%s did not start: %v\n%s", id, err, stderr.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &testService{base: "http://" + svc.addr.String(), stderr: stderr, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- svc.wait(ctx) }()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// TestClusterServicesShareOneState: two instances of the real program on one mock TiKV
// cluster share the limiter state, the result store and the settings.
func TestClusterServicesShareOneState(t *testing.T) {
	origin := origintest.New(nil)
	defer origin.Close()
	c := tikvtest.NewCluster(t)
	args := []string{"--connect-to", origin.ConnectTo(), "--max-concurrent-count", "8", "--request-timeout-ms", "5000"}
	a := startClusterService(t, c, "instance-a", args...)
	b := startClusterService(t, c, "instance-b", args...)

	// The interval holds across instances: a probe through a, then at once through b, which
	// asks for a minute since the domain's last request. (Every instance waits one interval
	// from its start before a domain's first request: hence 0 for the first probe.)
	if _, m := a.post(t, "/v1/probe", `{"url":"http://shared.test/","min_interval_ms":0,"should_render":false}`); m["has_reached_origin"] != true {
		t.Fatalf("first probe through a: %v", m)
	}
	probe := `{"url":"http://shared.test/","min_interval_ms":60000,"should_render":false}`
	if _, m := b.post(t, "/v1/probe", probe); m["fail_reason"] != "self_rate_limited" || m["has_reached_origin"] != false {
		t.Fatalf("second probe through b: %v; want self_rate_limited", m)
	}
	if n := origin.CountByHost()["shared.test"]; n != 1 {
		t.Errorf("the origin saw %d requests; want 1", n)
	}

	// One result store: a render stored through a is listed through b.
	resp, m := a.post(t, "/v1/render", `{"url":"http://stored.test/page","min_interval_ms":0,"should_render":false,"should_store":true}`)
	if resp.StatusCode != 200 || m["page_key"] == nil {
		t.Fatalf("stored render through a: %d %v", resp.StatusCode, m)
	}
	code, list := b.get(t, "/v1/fetch_results?domain=stored.test")
	if items, _ := list["fetch_results"].([]any); code != 200 || len(items) != 1 {
		t.Errorf("fetch_results of stored.test through b: %d %v", code, list)
	}
	if code, _ := b.get(t, fmt.Sprintf("/v1/pages/%s", m["page_key"])); code != 200 {
		t.Errorf("page through b: %d", code)
	}

	// One cap: changed through a, seen by b within seconds.
	if code, m := a.put(t, "/v1/settings", `{"max_concurrent_count":5}`); code != 200 || m["max_concurrent_count"] != float64(5) {
		t.Fatalf("PUT /v1/settings through a: %d %v", code, m)
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond) // polling the other instance: nothing to wait on
	defer tick.Stop()
	for {
		_, m := b.get(t, "/v1/settings")
		if m["max_concurrent_count"] == float64(5) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b still answers %v", m)
		}
		<-tick.C
	}
	// The cluster view: both instances through either, with their addresses; the domain's
	// shared record beside b's own (b never admitted shared.test: only the cluster's).
	for {
		code, m := b.get(t, "/v1/cluster")
		if code != 200 {
			t.Fatalf("GET /v1/cluster through b: %d %v", code, m)
		}
		list, _ := m["instances"].([]any)
		shares, bShare := 0.0, 0.0
		for _, in := range list {
			shares += in.(map[string]any)["capacity_share_count"].(float64)
			if in.(map[string]any)["instance_id"] == "instance-b" {
				bShare = in.(map[string]any)["capacity_share_count"].(float64)
			}
		}
		// The shares settle over a heartbeat or two: each takes its share within what the
		// other's claim leaves.
		if m["store_backend"] == "tikv" && m["instance_id"] == "instance-b" && m["live_instance_count"] == float64(2) && shares == 5 &&
			(bShare == 2 || bShare == 3) {
			first := list[0].(map[string]any)
			if first["instance_id"] != "instance-a" || first["address"] != strings.TrimPrefix(a.base, "http://") {
				t.Errorf("instance a listed as %v; want its address %s", first, a.base)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/cluster through b: %v; want both live, shares summing to 5", m)
		}
		<-tick.C
	}
	code, m = b.get(t, "/v1/domains/shared.test")
	if cl, _ := m["cluster"].(map[string]any); code != 200 || cl["last_instance_id"] != "instance-a" || cl["is_stored"] != true {
		t.Errorf("GET /v1/domains/shared.test through b: %d %v; want the cluster's record, set by a", code, m)
	}
	// /metrics: the cluster-wide setting, and b's share beside it.
	resp, err := http.Get(b.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "\ndownloader_max_concurrent_count 5\n") ||
		!regexp.MustCompile(`\ndownloader_instance_max_concurrent_count [23]\n`).Match(body) ||
		!strings.Contains(string(body), "\ndownloader_egress_is_unavailable 0\n") {
		t.Errorf("/metrics of b lacks the cluster cap 5, b's share (2 or 3) or the egress state:\n%s", body)
	}
}

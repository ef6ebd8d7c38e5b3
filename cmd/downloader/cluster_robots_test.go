package main

import (
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"downloader/internal/testkit"
	"downloader/origintest"
	"downloader/store/tikv/tikvtest"
)

// TestClusterRobots: with --store tikv the local queue's tasks obey robots.txt too, and
// the robots.txt request is one of the engine's like any other: admitted cluster-wide (an
// instance that never saw the domain refuses a probe within the interval robots.txt
// opened), counted in /metrics as entry A's request, and never stored.
func TestClusterRobots(t *testing.T) {
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		switch {
		case r.URL.Path == "/robots.txt" && host == "closed.test":
			fmt.Fprint(w, "User-agent: *\nDisallow: /\n")
		case r.URL.Path == "/robots.txt" && host == "polite.test":
			fmt.Fprint(w, "User-agent: downloader\nDisallow: /private\n")
		case r.URL.Path == "/robots.txt":
			http.NotFound(w, r)
		default:
			origintest.Page(w, r)
		}
	}))
	defer origin.Close()
	c := tikvtest.NewCluster(t)
	args := []string{"--connect-to", origin.ConnectTo(), "--max-concurrent-count", "8", "--request-timeout-ms", "5000",
		"--user-agent", "downloader/1.0 (+https://example.invalid/crawler)"}
	a := startClusterService(t, c, "instance-a", args...)
	b := startClusterService(t, c, "instance-b", args...)

	tasks := `{"tasks":[{"url":"http://polite.test/a","min_interval_ms":0},{"url":"http://polite.test/private/x","min_interval_ms":0},` +
		`{"url":"http://closed.test/a","min_interval_ms":0}]}`
	if resp, m := a.post(t, "/v1/tasks", tasks); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/tasks: %d %v", resp.StatusCode, m)
	}
	testkit.WaitFor(t, 30*time.Second, "two tasks skipped and one done", func() bool {
		_, skipped := a.get(t, "/v1/tasks?state=skipped")
		_, done := a.get(t, "/v1/tasks?state=done")
		s, _ := skipped["tasks"].([]any)
		d, _ := done["tasks"].([]any)
		return len(s) == 2 && len(d) == 1
	})
	got := map[string]int{}
	for _, ar := range origin.Arrivals() {
		got[ar.Host+ar.Path]++
	}
	want := map[string]int{"polite.test/robots.txt": 1, "polite.test/a": 1, "closed.test/robots.txt": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the origin saw %v; want %v (robots.txt once per site, no disallowed path)", got, want)
	}

	// closed.test saw robots.txt alone, through a: its slot is the cluster's, so b refuses
	// a request within a minute of it, and the shared record names a.
	probe := `{"url":"http://closed.test/","min_interval_ms":60000,"should_render":false}`
	if _, m := b.post(t, "/v1/probe", probe); m["fail_reason"] != "self_rate_limited" || m["has_reached_origin"] != false {
		t.Errorf("probe of closed.test through b: %v; want self_rate_limited (robots.txt took the shared slot)", m)
	}
	code, m := b.get(t, "/v1/domains/closed.test")
	if cl, _ := m["cluster"].(map[string]any); code != 200 || cl["last_instance_id"] != "instance-a" {
		t.Errorf("GET /v1/domains/closed.test through b: %d %v; want the cluster's record, set by a", code, m)
	}
	// Nothing of robots.txt is stored.
	if code, m := a.get(t, "/v1/fetch_results?domain=closed.test"); code != 200 || len(m["fetch_results"].([]any)) != 0 {
		t.Errorf("fetch_results of closed.test: %d %v; want none", code, m)
	}
	// Counted as entry A's requests: two robots.txt and one page, all reached.
	body := scrape(t, a)
	n := 0.0
	for _, line := range regexp.MustCompile(`(?m)^downloader_requests_total\{[^}]*entry="a"[^}]*\} (\S+)$`).FindAllStringSubmatch(body, -1) {
		var v float64
		fmt.Sscan(line[1], &v)
		n += v
	}
	if n != 3 {
		t.Errorf("downloader_requests_total of entry a: %v; want 3 (two robots.txt, one page):\n%s", n,
			strings.Join(regexp.MustCompile(`(?m)^downloader_requests_total.*$`).FindAllString(body, -1), "\n"))
	}
}

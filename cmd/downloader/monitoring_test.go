package main

import (
	"bytes"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"downloader/internal/testkit"
	"downloader/monitoring"
)

// seriesNames returns the sample names of a text exposition and the type of each family.
func seriesNames(exposition string) (names map[string]bool, types map[string]string) {
	names, types = map[string]bool{}, map[string]string{}
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if name, typ, ok := strings.Cut(rest, " "); ok {
				types[name] = typ
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names, types
}

// TestMonitoringMetricsExist: every metric the shipped alert rules and the Grafana
// dashboard query is on a running service's /metrics, and promlint (promtool check
// metrics) flags nothing but the _count gauges that share their JSON field's name (the
// recorded decision "Gauges share the JSON field's name" in docs/decisions.md).
func TestMonitoringMetricsExist(t *testing.T) {
	s := startTestService(t)
	body := scrape(t, s)
	names, types := seriesNames(body)
	queried, err := monitoring.QueriedMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if len(queried) < 15 {
		t.Fatalf("the rules and dashboard query only %v", queried)
	}
	for _, q := range queried {
		if !names[q] {
			t.Errorf("monitoring/ queries %s, which /metrics does not have", q)
		}
	}

	cmd := exec.Command(testkit.Promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run() // exit status 1 when it has anything to say
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatal(err)
	}
	countSuffix := regexp.MustCompile(`^(\S+) non-histogram and non-summary metrics should not have "_count" suffix$`)
	var flagged []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		m := countSuffix.FindStringSubmatch(line)
		if m == nil || types[m[1]] != "gauge" || !strings.HasPrefix(m[1], "downloader_") {
			t.Errorf("promlint flags more than a _count gauge: %s", line)
			continue
		}
		flagged = append(flagged, m[1])
	}
	// promlint did run: it names the _count gauges, and all of them.
	var gauges []string
	for name, typ := range types {
		if typ == "gauge" && strings.HasPrefix(name, "downloader_") && strings.HasSuffix(name, "_count") {
			gauges = append(gauges, name)
		}
	}
	slices.Sort(flagged)
	slices.Sort(gauges)
	if len(gauges) == 0 || !slices.Equal(flagged, gauges) {
		t.Errorf("promlint flagged %v; the _count gauges are %v", flagged, gauges)
	}
	t.Logf("%d metrics queried by monitoring/, all on /metrics; promlint flags only the %d _count gauges", len(queried), len(flagged))
}

// TestMetricsToken: with --metrics-token, /metrics needs it as a bearer token (as
// Prometheus' authorization scrape setting sends it); the other tokens do not open it.
func TestMetricsToken(t *testing.T) {
	s := startTestService(t, "--metrics-token", "scrape-secret", "--api-token", "api-secret", "--admin-token", "admin-secret")
	for token, want := range map[string]int{"": 401, "api-secret": 401, "admin-secret": 401, "scrape-secret": 200} {
		req, _ := http.NewRequest("GET", s.base+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("/metrics with %q: %d, want %d", token, resp.StatusCode, want)
		}
	}
}

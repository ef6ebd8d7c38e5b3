package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"downloader/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(testkit.Promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestAlertRules(t *testing.T) {
	out := runPromtool(t, "check", "rules", "alerts.yml")
	if !strings.Contains(out, "SUCCESS: 7 rules found") {
		t.Errorf("promtool check rules: %s", out)
	}
	out = runPromtool(t, "test", "rules", "alerts_test.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules: %s", out)
	}
}

// TestEveryAlertIsTested: each alert of alerts.yml has, in alerts_test.yml, an evaluation
// where it fires and one where it stays quiet, and the tests name no other alert.
func TestEveryAlertIsTested(t *testing.T) {
	tests, err := os.ReadFile("alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatch(string(Alerts), -1) {
		alerts = append(alerts, m[1])
	}
	want := []string{"DownloaderCapSaturated", "DownloaderEgressUnavailable", "DownloaderInstanceFenced", "DownloaderOverLimitSpike",
		"DownloaderProbesNotReachingOrigin", "DownloaderRendererUnavailable", "DownloaderRuntimeStoreUnavailable"}
	if got := slices.Sorted(slices.Values(alerts)); !slices.Equal(got, want) {
		t.Fatalf("alerts %v, want %v", got, want)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, m := range regexp.MustCompile(`alertname: (\w+)\n\s+exp_alerts:( \[\])?`).FindAllStringSubmatch(string(tests), -1) {
		if !slices.Contains(alerts, m[1]) {
			t.Errorf("alerts_test.yml tests %s, which alerts.yml does not define", m[1])
		}
		if m[2] == "" {
			fires[m[1]] = true
		} else {
			quiet[m[1]] = true
		}
	}
	for _, a := range alerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("%s: fires in a test %v, stays quiet in one %v; want both", a, fires[a], quiet[a])
		}
	}
}

// TestDashboard: the dashboard is Grafana JSON whose every panel has a title and queries,
// and every query is valid PromQL (promtool checks it as a recording rule once Grafana's
// variables are substituted).
func TestDashboard(t *testing.T) {
	var d struct {
		UID    string           `json:"uid"`
		Title  string           `json:"title"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(Dashboard, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q", d.UID, d.Title)
	}
	var raw struct {
		Panels []struct {
			ID      int                `json:"id"`
			GridPos struct{ X, W int } `json:"gridPos"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(Dashboard, &raw); err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	for _, p := range raw.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 {
			t.Errorf("panel %d: gridPos x %d w %d beyond Grafana's 24 columns", p.ID, p.GridPos.X, p.GridPos.W)
		}
	}
	for _, p := range d.Panels {
		if p.Title == "" {
			t.Errorf("a %s panel without a title", p.Type)
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
	queries, err := DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) < 15 {
		t.Fatalf("%d queries: the dashboard lost its panels", len(queries))
	}
	subst := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range queries {
		q = subst.Replace(q)
		if strings.HasPrefix(q, "label_values(") { // a Grafana function: check its metric
			q = strings.TrimSuffix(strings.TrimPrefix(q, "label_values("), ", instance)")
		}
		if strings.Contains(q, "$") {
			t.Errorf("query %q keeps a variable the test does not substitute", q)
		}
		b, _ := json.Marshal(q) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", i, b)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, "check", "rules", path)
}

func TestQueriedMetrics(t *testing.T) {
	names, err := QueriedMetrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"downloader_egress_is_unavailable", "downloader_renderer_is_up", "downloader_requests_total",
		"downloader_probes_total", "downloader_over_limit_total", "downloader_render_duration_seconds_bucket", "downloader_in_flight_count", "downloader_instance_is_fenced"} {
		if !slices.Contains(names, want) {
			t.Errorf("QueriedMetrics() %v lacks %s", names, want)
		}
	}
}

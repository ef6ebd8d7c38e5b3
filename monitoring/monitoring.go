// Package monitoring ships the downloader's Prometheus alert rules (alerts.yml, with their
// promtool unit tests in alerts_test.yml) and its Grafana dashboard
// (grafana-dashboard.json), and names the metrics they query, so that a test of the
// running service can check that each one exists on its /metrics. The service itself
// does not link this package: it is assets plus their tests.
package monitoring

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
)

// Alerts is alerts.yml, the rule file to give Prometheus (rule_files).
//
//go:embed alerts.yml
var Alerts []byte

// Dashboard is grafana-dashboard.json, to import into Grafana.
//
//go:embed grafana-dashboard.json
var Dashboard []byte

// metricName matches the downloader's own series names (histograms by their _bucket,
// _sum and _count series, as /metrics shows them).
var metricName = regexp.MustCompile(`\bdownloader_[a-z0-9_]+\b`)

// QueriedMetrics returns the sorted series names the alert rules and the dashboard's
// queries (panel targets and template variables) use.
func QueriedMetrics() ([]string, error) {
	exprs, err := DashboardQueries()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, text := range append([]string{string(Alerts)}, exprs...) {
		names = append(names, metricName.FindAllString(text, -1)...)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// DashboardQueries returns the PromQL of every panel target and query variable of the
// dashboard, as written (with Grafana's $variables).
func DashboardQueries() ([]string, error) {
	var d struct {
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(Dashboard, &d); err != nil {
		return nil, fmt.Errorf("grafana-dashboard.json: %w", err)
	}
	var out []string
	var walk func(ps []dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, t.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		switch q := v.Query.(type) {
		case string:
			out = append(out, q)
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

type dashboardPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's
}

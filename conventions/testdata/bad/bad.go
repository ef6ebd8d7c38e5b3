// Package bad breaks the naming convention once per marked line; the test expects
// exactly the rules named after "want" on each line and nothing anywhere else.
package bad

import (
	"flag"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type Summary struct {
	StatusCode      int           `json:"status_code"`       // want one_name count_suffix
	Reached         bool          `json:"reached"`           // want one_name bool_prefix
	Render          bool          `json:"render"`            // want one_name bool_prefix
	Stored          bool          `json:"is_stored"`         // want go_name
	Requests        int           `json:"requests"`          // want count_suffix
	Size            int           `json:"size"`              // want count_suffix
	RequestCount24h int           `json:"request_count_24h"` // want count_suffix
	Timeout         time.Duration `json:"timeout"`           // want duration_unit
	Delay           int64         `json:"delay"`             // want duration_unit count_suffix
	FetchedTime     time.Time     `json:"fetched_time"`      // want instant_at
	Created         time.Time     `json:"created"`           // want instant_at
	StartedAt       int64         `json:"started_at"`        // want instant_at count_suffix
	FailReason      string        `json:"failReason"`        // want case
	DomainName      string        `json:"Domain-Name"`       // want case
	InFlight        int           `json:"in_flight"`         // want one_name count_suffix
	RetryAfter      int           `json:"retry_after"`       // want one_name count_suffix
	MaxConcurrency  int           `json:"max_concurrency"`   // want one_name count_suffix
	URL             string        `json:",omitempty"`        // want case
}

func logs(l *slog.Logger, d time.Duration, ok bool) {
	l.Info("fetched", "statusCode", 200) // want case
	l.Warn("refused", "reached", false)  // want one_name bool_prefix
	l.Info("done", "up", ok == true)     // want bool_prefix
	l.Info("took", "elapsed", d)         // want duration_unit
	l.LogAttrs(nil, slog.LevelInfo, "x",
		slog.Duration("wait_ms", d),            // want duration_unit
		slog.Bool("remote", true),              // want bool_prefix
		slog.Time("start", time.Now()),         // want instant_at
		slog.Int("retries", 3),                 // want count_suffix
		slog.String("http_status_code", "502"), // want one_name
	)
	l.With("started_time", time.Now()).Info("ready") // want instant_at
}

func flags(fs *flag.FlagSet) {
	var b bool
	var n int
	var d time.Duration
	fs.BoolVar(&b, "render", false, "")          // want one_name bool_prefix
	fs.IntVar(&n, "workers", 4, "")              // want count_suffix
	fs.DurationVar(&d, "request-timeout", 0, "") // want duration_unit
	fs.Int("max_tasks", 1, "")                   // want case
}

func metrics() {
	prometheus.NewCounterVec(prometheus.CounterOpts{Name: "downloader_requests"}, // want metric_suffix
		[]string{"entry", "status_code"}) // want one_name
	prometheus.NewCounter(prometheus.CounterOpts{Namespace: "downloader", Name: "probe_count_total"}) // want metric_suffix
	prometheus.NewHistogram(prometheus.HistogramOpts{Name: "downloader_fetch_duration_ms"})           // want metric_suffix metric_unit
	prometheus.NewGauge(prometheus.GaugeOpts{Name: "downloader_in_flight"})                           // want metric_suffix
	prometheus.NewGauge(prometheus.GaugeOpts{Name: "fetcher_queue_count"})                            // want metric_prefix
	prometheus.NewDesc("downloader_renderer_up", "", []string{"reached"}, nil)                        // want metric_suffix one_name
}

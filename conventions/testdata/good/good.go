// Package good follows the naming convention everywhere: the checker must find nothing.
package good

import (
	"flag"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "downloader"

type Summary struct {
	Domain                string     `json:"domain"`
	HTTPStatus            *int       `json:"http_status"`
	HasReachedOrigin      bool       `json:"has_reached_origin"`
	ShouldRender          bool       `json:"should_render"`
	FailReason            *string    `json:"fail_reason"`
	RawTextLength         *int       `json:"raw_text_length"`
	XHRFailedCount        *int       `json:"xhr_failed_count"`
	MinIntervalMs         int64      `json:"min_interval_ms"`
	RetryAfterSeconds     int64      `json:"retry_after_seconds"`
	Request24hCount       uint64     `json:"request_24h_count"`
	LastRequestAt         time.Time  `json:"last_request_at"`
	LeaseExpiresAt        *time.Time `json:"lease_expires_at"`
	TaskID                string     `json:"task_id"`
	OverLimitRatio        float64    `json:"over_limit_ratio"`
	AchievedRatePerSecond float64    `json:"achieved_rate_per_second"`
	Seq                   uint64     `json:"seq"`
	Hidden                string     `json:"-"`
	Body                  []byte
	// The browser's name, not ours. naming:external (Chrome's /json/version)
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

func logs(l *slog.Logger, d time.Duration) {
	l.Info("probe", "domain", "a.test", "has_reached_origin", true, "elapsed_ms", d.Milliseconds())
	l.LogAttrs(nil, slog.LevelInfo, "over limit", slog.Bool("is_over_limit", true),
		slog.Int64("retry_after_seconds", 2), slog.Time("changed_at", time.Now()), slog.Any("fail_reason", nil))
	l.Error("store failed", "error", "disk full", "task_id", "t-1")
}

func flags(fs *flag.FlagSet) {
	var n int
	var s string
	fs.IntVar(&n, "max-concurrent-count", 64, "")
	fs.StringVar(&s, "renderer-endpoint", "", "")
	fs.Int64("request-timeout-ms", 30000, "")
	fs.Bool("is-dry-run", false, "")
}

func metrics() {
	prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "requests_total"},
		[]string{"entry", "fail_reason", "has_reached_origin", "should_render"})
	prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "downloader_render_duration_seconds"}, []string{"entry"})
	prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "renderer", Name: "busy_count"})
	prometheus.NewDesc(prometheus.BuildFQName(namespace, "renderer", "is_up"), "", nil, nil)
	prometheus.NewDesc("downloader_renderer_restarts_total", "", nil, nil)
}

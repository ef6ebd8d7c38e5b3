package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"downloader/observe"
)

// queueCollector reads the local queue's counts at each scrape (Sources.LocalQueue). The
// gauges share the JSON field names of GET /v1/console/runtime's local_queue (SPEC §7).
type queueCollector struct {
	read                                                     func() (observe.QueueCounts, bool)
	pending, leased, done, succeeded, failed, skipped, pages *prometheus.Desc
	retries                                                  *prometheus.Desc
}

func newQueueCollector(read func() (observe.QueueCounts, bool)) *queueCollector {
	return &queueCollector{
		read:      read,
		pending:   prometheus.NewDesc("downloader_local_queue_pending_count", "Local queue tasks waiting to run (a retry's backoff included).", nil, nil),
		leased:    prometheus.NewDesc("downloader_local_queue_leased_count", "Local queue tasks running now.", nil, nil),
		done:      prometheus.NewDesc("downloader_local_queue_done_count", "Local queue tasks fetched, successfully or not.", nil, nil),
		succeeded: prometheus.NewDesc("downloader_local_queue_succeeded_count", "Local queue tasks fetched successfully.", nil, nil),
		failed:    prometheus.NewDesc("downloader_local_queue_failed_count", "Local queue tasks finished with a fail_reason.", nil, nil),
		skipped:   prometheus.NewDesc("downloader_local_queue_skipped_count", "Local queue tasks not fetched on purpose (robots.txt disallows them).", nil, nil),
		pages:     prometheus.NewDesc("downloader_local_queue_page_count", "Local queue tasks whose page was stored.", nil, nil),
		retries:   prometheus.NewDesc("downloader_local_queue_retries_total", "Retries the local queue scheduled (in place or after a backoff), over the data dir's life.", nil, nil),
	}
}

func (q *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{q.pending, q.leased, q.done, q.succeeded, q.failed, q.skipped, q.pages, q.retries} {
		ch <- d
	}
}

// Collect sends nothing while there is no local queue (a scheduler feeds entry A).
func (q *queueCollector) Collect(ch chan<- prometheus.Metric) {
	c, ok := q.read()
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	gauge(q.pending, c.PendingCount)
	gauge(q.leased, c.LeasedCount)
	gauge(q.done, c.DoneCount)
	gauge(q.succeeded, c.SucceededCount)
	gauge(q.failed, c.FailedCount)
	gauge(q.skipped, c.SkippedCount)
	gauge(q.pages, c.PageCount)
	ch <- prometheus.MustNewConstMetric(q.retries, prometheus.CounterValue, float64(c.RetryCount))
}

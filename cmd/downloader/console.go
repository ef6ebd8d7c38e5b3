package main

import (
	"downloader"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"downloader/clock"
	"downloader/console"
	"downloader/limiter"
	"downloader/localqueue"
	"downloader/metrics"
	"downloader/observe"
	"downloader/render"
	"downloader/server"
)

// observability is what the service knows about its own work: the engine's observer (24 h
// windows, log lines), the Prometheus registry and metrics, and the domain table view the
// console and the metrics share. It is built before the engine, which reports to it.
type observability struct {
	clk      clock.Clock
	log      *slog.Logger
	registry *prometheus.Registry
	observer *observe.Observer
	domains  *observe.DomainTable
	renderer func() downloader.RendererStats
	// queue is entry A's local queue once it is open (nil with a scheduler): the console's
	// queue panel and the downloader_local_queue_* metrics read it.
	queue atomic.Pointer[localqueue.Queue]
}

// queueCounts reads the local queue's counts; ok is false while there is none.
func (o *observability) queueCounts() (observe.QueueCounts, bool) {
	q := o.queue.Load()
	if q == nil {
		return observe.QueueCounts{}, false
	}
	c := q.Counts()
	return observe.QueueCounts{PendingCount: c.PendingCount, LeasedCount: c.LeasedCount, DoneCount: c.DoneCount,
		SucceededCount: c.SucceededCount, FailedCount: c.DoneCount - c.SucceededCount, SkippedCount: c.SkippedCount,
		RetryCount: c.RetryCount, PageCount: c.PageCount}, true
}

// live adds what metrics.Sources cannot take from the other arguments: the cluster-wide cap
// (cluster mode), the egress detector's state and the instance's fence.
func newObservability(clk clock.Clock, logger *slog.Logger, lim *limiter.Limiter, gate *limiter.Gate, pool *render.Pool, live metrics.Sources) (*observability, error) {
	o := &observability{clk: clk, log: logger, registry: prometheus.NewRegistry(),
		domains: observe.NewDomainTable(lim, observe.DefaultSnapshotTTL)}
	if pool != nil {
		o.renderer = pool.Stats
	}
	if err := o.registry.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("register go metrics: %w", err)
	}
	if err := o.registry.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("register process metrics: %w", err)
	}
	m, err := metrics.New(o.registry, metrics.Sources{Clock: clk, Gate: gate, Domains: o.domains, Renderer: o.renderer,
		MaxConcurrentCount: live.MaxConcurrentCount, Egress: live.Egress, Fence: live.Fence, LocalQueue: o.queueCounts})
	if err != nil {
		return nil, err
	}
	o.observer = observe.New(observe.Config{Clock: clk, Logger: logger, Sinks: []downloader.Observer{m}})
	return o, nil
}

// routes returns the console's and /metrics' routes for server.Config.Extra. views holds
// what the console reads from the other components (settings, limiter, gate, cluster,
// egress); the rest of its configuration is the observability's own.
func (o *observability) routes(views console.Config) (func(*http.ServeMux), error) {
	views.Clock, views.Observer, views.Domains, views.Renderer = o.clk, o.observer, o.domains, o.renderer
	views.Logger, views.Session, views.LocalQueue = o.log, server.Session, o.queueCounts
	con, err := console.New(views)
	if err != nil {
		return nil, err
	}
	return func(mux *http.ServeMux) {
		con.Register(mux)
		mux.Handle("GET /metrics", metrics.Handler(o.registry))
	}, nil
}

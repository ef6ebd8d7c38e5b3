// Package metrics exposes the downloader on /metrics with prometheus/client_golang, on a
// registry the caller passes in (no global registry, no promauto).
//
// Names follow SPEC §7 plus the ecosystem's suffixes: counters end in _total, durations
// in _seconds, and a gauge that counts something carries the same name as the JSON field
// of that concept (downloader_in_flight_count ↔ in_flight_count,
// downloader_max_concurrent_count ↔ max_concurrent_count). promlint's advice against a
// gauge ending in _count is deliberately not followed: one name per concept across the
// API, the logs and the metrics wins, and no histogram of ours is called in_flight etc.
//
// Label values: entry is a, b or c; fail_reason is the closed set of SPEC §4 or "none"
// for success; has_reached_origin and should_render are "true" or "false".
package metrics

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
	"downloader/observe"
)

// NoFailReason is the fail_reason label value of a success.
const NoFailReason = "none"

// Sources are the live values read at every scrape. Any of them may be nil: its metrics
// are then left out.
type Sources struct {
	Clock    clock.Clock                     // default clock.Real{}
	Gate     *limiter.Gate                   // in flight, cap, queue depth
	Domains  *observe.DomainTable            // domains in the table, active domains
	Renderer func() downloader.RendererStats // the renderer pool
	// MaxConcurrentCount is the cluster-wide max_concurrent_count (cluster mode: the
	// shared runtime's); nil: the gate's capacity, which is the setting on one machine.
	MaxConcurrentCount func() int
	// Egress is the egress detector's state; nil: no egress metrics.
	Egress func() downloader.EgressState
	// Fence is this instance's fence from its cluster (cluster mode: the shared runtime's
	// FenceState; one machine: never fenced); nil: no fence metric.
	Fence func() downloader.FenceState
	// LocalQueue reads the local queue's counts; ok is false while there is none (a
	// scheduler feeds entry A). nil: no queue metrics.
	LocalQueue func() (c observe.QueueCounts, ok bool)
}

// Metrics counts engine events into Prometheus metrics. It implements downloader.Observer
// and is safe for concurrent use. Create it with New.
type Metrics struct {
	requests       *prometheus.CounterVec
	overLimit      *prometheus.CounterVec
	paced          *prometheus.CounterVec
	bodyBytes      *prometheus.CounterVec
	probes         *prometheus.CounterVec
	fetchDuration  *prometheus.HistogramVec
	renderDuration *prometheus.HistogramVec
}

var _ downloader.Observer = (*Metrics)(nil)

// New creates the metrics and registers them, with a collector of the live values of src,
// on reg. It fails if any of them is already registered there.
func New(reg prometheus.Registerer, src Sources) (*Metrics, error) {
	if src.Clock == nil {
		src.Clock = clock.Real{}
	}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "downloader_requests_total",
			Help: "Requests answered, by entry (a lease loop, b render, c probe) and outcome; B and C refusals over the limit included.",
		}, []string{"entry", "should_render", "has_reached_origin", "fail_reason"}),
		overLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "downloader_over_limit_total",
			Help: "Over-limit events by entry: A delayed, B answered 429, C answered not reached; fail_reason self_rate_limited (domain interval) or local_queue_full (global cap and queue).",
		}, []string{"entry", "fail_reason"}),
		paced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "downloader_paced_total",
			Help: "Tasks of a source that paces each domain itself (the local queue) that waited at the limiter for their domain's slot: pacing, not over-limit events.",
		}, []string{"entry"}),
		bodyBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "downloader_body_bytes_total",
			Help: "Body bytes of the finished requests (health_signal.body_bytes), by entry.",
		}, []string{"entry"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "downloader_probes_total",
			Help: "Entry C probes by result, refusals included.",
		}, []string{"should_render", "has_reached_origin", "fail_reason"}),
		fetchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "downloader_fetch_duration_seconds",
			Help:    "Service time of plain fetches (should_render=false), from a global slot to the answer.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"entry"}),
		renderDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "downloader_render_duration_seconds",
			Help:    "Service time of renders (should_render=true), from a global slot to the answer.",
			Buckets: []float64{.1, .25, .5, 1, 2, 4, 8, 15, 30, 60},
		}, []string{"entry"}),
	}
	// Every series of the closed sets exists from the start, at zero.
	for _, e := range downloader.Entries {
		for _, r := range reasonLabels() {
			for _, sr := range []bool{false, true} {
				m.requests.WithLabelValues(string(e), strconv.FormatBool(sr), reachedLabel(r), r)
			}
		}
		for _, r := range []downloader.FailReason{downloader.FailSelfRateLimited, downloader.FailLocalQueueFull} {
			m.overLimit.WithLabelValues(string(e), string(r))
		}
		m.paced.WithLabelValues(string(e))
		m.bodyBytes.WithLabelValues(string(e))
		m.fetchDuration.WithLabelValues(string(e))
		m.renderDuration.WithLabelValues(string(e))
	}
	for _, r := range reasonLabels() {
		for _, sr := range []bool{false, true} {
			m.probes.WithLabelValues(strconv.FormatBool(sr), reachedLabel(r), r)
		}
	}
	collectors := []prometheus.Collector{m.requests, m.overLimit, m.paced, m.bodyBytes, m.probes, m.fetchDuration, m.renderDuration, newLive(src)}
	if src.LocalQueue != nil {
		collectors = append(collectors, newQueueCollector(src.LocalQueue))
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// reasonLabels lists the fail_reason label values: none, then the closed set.
func reasonLabels() []string {
	out := []string{NoFailReason}
	for _, r := range downloader.FailReasons() {
		out = append(out, string(r))
	}
	return out
}

func reachedLabel(reason string) string {
	if reason == NoFailReason {
		return "true"
	}
	return strconv.FormatBool(downloader.FailReason(reason).HasReachedOrigin())
}

func reasonLabel(s *downloader.Summary) string {
	if s.FailReason == nil || *s.FailReason == "" {
		return NoFailReason
	}
	return string(*s.FailReason)
}

// Observe counts one engine event.
func (m *Metrics) Observe(ev *downloader.Event) {
	entry := string(ev.Entry)
	shouldRender := strconv.FormatBool(ev.ShouldRender)
	reason := reasonLabel(&ev.Summary)
	reached := strconv.FormatBool(ev.Summary.HasReachedOrigin)
	if ev.Paced {
		m.paced.WithLabelValues(entry).Inc()
		return // counted when the task finishes
	}
	if ev.OverLimit {
		r := reason
		if ev.Entry == downloader.EntryLease {
			// A is delayed, not refused: the domain's interval held it back.
			r = string(downloader.FailSelfRateLimited)
		}
		m.overLimit.WithLabelValues(entry, r).Inc()
		if ev.Entry == downloader.EntryLease {
			return // counted when the task finishes
		}
	}
	m.requests.WithLabelValues(entry, shouldRender, reached, reason).Inc()
	if ev.Entry == downloader.EntryProbe {
		m.probes.WithLabelValues(shouldRender, reached, reason).Inc()
	}
	if hs := ev.Summary.HealthSignal; !ev.OverLimit && hs != nil && hs.BodyBytes > 0 {
		m.bodyBytes.WithLabelValues(entry).Add(float64(hs.BodyBytes))
	}
	if !ev.OverLimit && ev.Duration > 0 {
		h := m.fetchDuration
		if ev.ShouldRender {
			h = m.renderDuration
		}
		h.WithLabelValues(entry).Observe(ev.Duration.Seconds())
	}
}

// Handler serves the metrics of g in the Prometheus text format.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// live collects the values read at scrape time.
type live struct {
	src Sources

	inFlight, maxConcurrent, queued                          *prometheus.Desc
	instanceMax, egressDown, egressFailing                   *prometheus.Desc
	domains, activeDomains                                   *prometheus.Desc
	rendererRestarts, rendererBusy                           *prometheus.Desc
	rendererQueued, rendererSlots, rendererEffective, rendUp *prometheus.Desc
	fenced                                                   *prometheus.Desc
	rendererGuardRefused                                     *prometheus.Desc
}

// newLive spells every name out in full, so that it can be grepped for and the
// naming-convention test (package conventions) sees it.
func newLive(src Sources) *live {
	return &live{
		src:                  src,
		inFlight:             prometheus.NewDesc("downloader_in_flight_count", "Requests holding a global slot now.", nil, nil),
		maxConcurrent:        prometheus.NewDesc("downloader_max_concurrent_count", "The global cap on requests in flight (changeable online); in cluster mode the cluster-wide setting.", nil, nil),
		instanceMax:          prometheus.NewDesc("downloader_instance_max_concurrent_count", "This instance's share of max_concurrent_count (its gate's capacity); the setting itself on one machine.", nil, nil),
		egressDown:           prometheus.NewDesc("downloader_egress_is_unavailable", "1 while the egress detector holds our own network to be down (failures are reported as egress_unavailable), else 0.", nil, nil),
		egressFailing:        prometheus.NewDesc("downloader_egress_failing_domain_count", "Distinct domains failing at network level within the egress detector's window.", nil, nil),
		queued:               prometheus.NewDesc("downloader_queued_count", "Requests waiting in the local queue for a global slot.", nil, nil),
		domains:              prometheus.NewDesc("downloader_domain_count", "Domains in downloader:domain_runtime (kept while they hold a 24 h statistic).", nil, nil),
		activeDomains:        prometheus.NewDesc("downloader_active_domain_count", "Domains in flight or requested within the last 5 minutes.", nil, nil),
		rendererRestarts:     prometheus.NewDesc("downloader_renderer_restarts_total", "Browser relaunches or reconnections since start.", nil, nil),
		rendererBusy:         prometheus.NewDesc("downloader_renderer_busy_count", "Renders running now.", nil, nil),
		rendererQueued:       prometheus.NewDesc("downloader_renderer_queued_count", "Renders waiting for a renderer slot.", nil, nil),
		rendererSlots:        prometheus.NewDesc("downloader_renderer_slot_count", "Renders the pool runs at once.", nil, nil),
		rendererEffective:    prometheus.NewDesc("downloader_renderer_effective_slot_count", "Renderer slots renders may take now: the slot count with --render-scaling=fixed, the controller's count (1 to the slot count) with adaptive.", nil, nil),
		rendUp:               prometheus.NewDesc("downloader_renderer_is_up", "1 when the browser is up, 0 while it is being (re)started or cannot be.", nil, nil),
		rendererGuardRefused: prometheus.NewDesc("downloader_renderer_is_guard_refused", "1 while the renderer endpoint is refused because its connect-time canary went around our guard (SPEC §3), else 0; labelled with the renderer kind.", []string{"renderer_kind"}, nil),
		// One series per reason of the closed set, 1 on the current one: the sum over
		// fence_reason is 0 or 1.
		fenced: prometheus.NewDesc("downloader_instance_is_fenced", "1 while this instance admits nothing new (fenced from the cluster: heartbeat_late, clock_skewed, not_registered, instance_id_taken_over), on the series of the reason; else 0. Never 1 on one machine.", []string{"fence_reason"}, nil),
	}
}

func (l *live) Describe(ch chan<- *prometheus.Desc) {
	if l.src.Gate != nil {
		ch <- l.inFlight
		ch <- l.maxConcurrent
		ch <- l.instanceMax
		ch <- l.queued
	}
	if l.src.Egress != nil {
		ch <- l.egressDown
		ch <- l.egressFailing
	}
	if l.src.Fence != nil {
		ch <- l.fenced
	}
	if l.src.Domains != nil {
		ch <- l.domains
		ch <- l.activeDomains
	}
	if l.src.Renderer != nil {
		ch <- l.rendererRestarts
		ch <- l.rendererBusy
		ch <- l.rendererQueued
		ch <- l.rendererSlots
		ch <- l.rendererEffective
		ch <- l.rendUp
		ch <- l.rendererGuardRefused
	}
}

func (l *live) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	if g := l.src.Gate; g != nil {
		gauge(l.inFlight, float64(g.InFlight()))
		setting := g.Capacity()
		if f := l.src.MaxConcurrentCount; f != nil {
			setting = f()
		}
		gauge(l.maxConcurrent, float64(setting))
		gauge(l.instanceMax, float64(g.Capacity()))
		gauge(l.queued, float64(g.Waiting()))
	}
	if f := l.src.Egress; f != nil {
		st := f()
		down := 0.0
		if st.IsUnavailable {
			down = 1
		}
		gauge(l.egressDown, down)
		gauge(l.egressFailing, float64(st.FailingDomainCount))
	}
	if f := l.src.Fence; f != nil {
		st := f()
		for _, r := range downloader.FenceReasons() {
			v := 0.0
			if st.IsFenced && st.FenceReason == r {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(l.fenced, prometheus.GaugeValue, v, r)
		}
	}
	if t := l.src.Domains; t != nil {
		s := t.Summary(l.src.Clock.Now())
		gauge(l.domains, float64(s.DomainCount))
		gauge(l.activeDomains, float64(s.ActiveDomainCount))
	}
	if f := l.src.Renderer; f != nil {
		s := f()
		ch <- prometheus.MustNewConstMetric(l.rendererRestarts, prometheus.CounterValue, float64(s.RestartCount))
		gauge(l.rendererBusy, float64(s.BusyCount))
		gauge(l.rendererQueued, float64(s.QueuedCount))
		gauge(l.rendererSlots, float64(s.SlotCount))
		gauge(l.rendererEffective, float64(s.EffectiveSlotCount))
		up := 0.0
		if s.IsBrowserUp {
			up = 1
		}
		gauge(l.rendUp, up)
		refused := 0.0
		if s.IsGuardRefused {
			refused = 1
		}
		ch <- prometheus.MustNewConstMetric(l.rendererGuardRefused, prometheus.GaugeValue, refused, s.RendererKind)
	}
}

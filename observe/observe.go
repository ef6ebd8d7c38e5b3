// Package observe is what the downloader knows about its own recent work: the engine's
// Observer, which keeps the 24 h rolling counts the console shows (requests and over-limit
// events per entry, probes by outcome) and the recent rate and service time, writes one
// JSON log line per probe and per over-limit event, and passes every event on to other
// observers (the Prometheus metrics); and DomainTable, a cached, sortable and searchable
// snapshot of the limiter's per-domain table.
//
// Memory is bounded whatever the traffic: counts live in 24 hourly buckets and 30
// ten-second buckets, and the only per-request records are the newest probe samples in a
// fixed ring (Config.SampleCount).
//
// Counting rules (the console's numbers follow from them):
//   - A request of an entry is every finished request plus every B or C request refused
//     over the limit (a refusal is an answer too). Entry A's over-limit event is a delay
//     of a task that is counted when it finishes.
//   - An over-limit event is a refusal (B: 429, C: self_rate_limited or local_queue_full)
//     or a delay (A). The share shown is over-limit events ÷ requests.
//   - A probe is every answer of entry C, refusals included: a refused probe is exactly the
//     record the scheduler must not count against the domain.
//   - The achieved rate counts finished requests of every entry; the mean service time
//     averages the Duration of finished requests that took any time.
package observe

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"downloader"
	"downloader/clock"
)

// Windows of the rolling counts.
const (
	// HourBuckets hourly buckets make the 24 h window (the current hour included).
	HourBuckets = 24
	// RecentSpan is the window of the achieved rate and the mean service time: long enough
	// to smooth bursts, short enough to show what binds now.
	RecentSpan = 5 * time.Minute
	// recentBucket is the width of the recent window's buckets.
	recentBucket = 10 * time.Second
)

// DefaultSampleCount is how many recent probe samples are kept when Config gives none.
const DefaultSampleCount = 200

// entryCount is the number of entries (A, B, C).
const entryCount = len(downloader.Entries)

// Config wires an Observer. Every field is optional.
type Config struct {
	Clock  clock.Clock  // default clock.Real{}
	Logger *slog.Logger // default: discard
	// Sinks are told about every event after the observer has counted it (e.g. metrics).
	Sinks []downloader.Observer
	// SampleCount is how many recent probe samples are kept (default DefaultSampleCount).
	SampleCount int
}

// hourCounts is one hourly bucket.
type hourCounts struct {
	requests     [entryCount]uint64
	overLimit    [entryCount]uint64
	queueFull    [entryCount]uint64 // over-limit events refused by the global cap and queue
	paced        [entryCount]uint64 // waits for a slot of a self-pacing source: not over limit
	bodyBytes    [entryCount]uint64 // health_signal.body_bytes of finished requests
	probes       uint64
	notReached   uint64
	renderProbes uint64
	probeReasons []uint64 // index 0: success; i+1: downloader.FailReasons()[i]
	finished     uint64
	serviceNs    uint64
	serviceCount uint64
	renderNs     uint64 // service time of finished renders (should_render=true)
	renderCount  uint64
}

// recentCounts is one ten-second bucket.
type recentCounts struct {
	finished     uint64
	serviceNs    uint64
	serviceCount uint64
}

// Observer implements downloader.Observer. It is safe for concurrent use; Observe takes one
// short lock. Create it with New.
type Observer struct {
	clk     clock.Clock
	log     *slog.Logger
	sinks   []downloader.Observer
	started time.Time // New's moment: the rates of a younger process use its real uptime

	reasons     []downloader.FailReason // display order; index+1 is the bucket index
	reasonIndex map[downloader.FailReason]int

	mu      sync.Mutex
	hours   ring[hourCounts]
	recent  ring[recentCounts]
	samples []ProbeSample // ring of the newest probe samples
	next    int           // where the next sample goes
	full    bool          // samples has wrapped
}

var _ downloader.Observer = (*Observer)(nil)

// New returns an observer with empty windows.
func New(cfg Config) *Observer {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SampleCount <= 0 {
		cfg.SampleCount = DefaultSampleCount
	}
	o := &Observer{
		clk:         cfg.Clock,
		started:     cfg.Clock.Now(),
		log:         cfg.Logger,
		sinks:       cfg.Sinks,
		reasons:     downloader.FailReasons(),
		reasonIndex: map[downloader.FailReason]int{"": 0},
		hours:       newRing[hourCounts](time.Hour, HourBuckets),
		recent:      newRing[recentCounts](recentBucket, int(RecentSpan/recentBucket)),
		samples:     make([]ProbeSample, cfg.SampleCount),
	}
	for i, r := range o.reasons {
		o.reasonIndex[r] = i + 1
	}
	return o
}

// entryIndex returns the index of e in downloader.Entries, or -1.
func entryIndex(e downloader.Entry) int {
	for i, x := range downloader.Entries {
		if x == e {
			return i
		}
	}
	return -1
}

// Observe counts ev, keeps it as a sample if it is a probe, logs it, and passes it on.
func (o *Observer) Observe(ev *downloader.Event) {
	now := o.clk.Now()
	o.count(ev, now)
	o.logEvent(ev)
	for _, s := range o.sinks {
		s.Observe(ev)
	}
}

func (o *Observer) count(ev *downloader.Event, now time.Time) {
	e := entryIndex(ev.Entry)
	if e < 0 {
		return
	}
	reason := failReasonOf(ev)
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.hours.at(now)
	if h.probeReasons == nil {
		h.probeReasons = make([]uint64, len(o.reasons)+1)
	}
	if ev.Paced {
		h.paced[e]++ // neither a request (counted when it finishes) nor over limit
		return
	}
	if ev.OverLimit {
		h.overLimit[e]++
		if reason == downloader.FailLocalQueueFull {
			h.queueFull[e]++
		}
		if ev.Entry != downloader.EntryLease {
			h.requests[e]++
		}
	} else {
		h.requests[e]++
		h.finished++
		if hs := ev.Summary.HealthSignal; hs != nil && hs.BodyBytes > 0 {
			h.bodyBytes[e] += uint64(hs.BodyBytes)
		}
		r := o.recent.at(now)
		r.finished++
		if ev.Duration > 0 {
			h.serviceNs += uint64(ev.Duration)
			h.serviceCount++
			if ev.ShouldRender {
				h.renderNs += uint64(ev.Duration)
				h.renderCount++
			}
			r.serviceNs += uint64(ev.Duration)
			r.serviceCount++
		}
	}
	if ev.Entry != downloader.EntryProbe {
		return
	}
	h.probes++
	if !ev.Summary.HasReachedOrigin {
		h.notReached++
	}
	if ev.ShouldRender {
		h.renderProbes++
	}
	if i, ok := o.reasonIndex[reason]; ok {
		h.probeReasons[i]++
	}
	o.samples[o.next] = sampleOf(ev, now)
	o.next++
	if o.next == len(o.samples) {
		o.next, o.full = 0, true
	}
}

// failReasonOf returns the event's fail reason ("" for success or a delay).
func failReasonOf(ev *downloader.Event) downloader.FailReason {
	if ev.Summary.FailReason == nil {
		return ""
	}
	return *ev.Summary.FailReason
}

// Counts are the 24 h rolling counts (the current hour and the 23 before it).
type Counts struct {
	Entries []EntryCounts `json:"entries"` // A, B, C in display order
	// Request24hCount and OverLimit24hCount sum the entries.
	Request24hCount   uint64 `json:"request_24h_count"`
	OverLimit24hCount uint64 `json:"over_limit_24h_count"`
	// OverLimitRatio is OverLimit24hCount ÷ Request24hCount, 0 without requests.
	OverLimitRatio float64 `json:"over_limit_ratio"`
	// Paced24hCount sums the entries' paced waits (never part of the ratio).
	Paced24hCount    uint64      `json:"paced_24h_count"`
	Finished24hCount uint64      `json:"finished_24h_count"`
	Probes           ProbeCounts `json:"probes"`
}

// EntryCounts are one entry's 24 h counts.
type EntryCounts struct {
	Entry             downloader.Entry `json:"entry"`
	Request24hCount   uint64           `json:"request_24h_count"`
	OverLimit24hCount uint64           `json:"over_limit_24h_count"`
	// LocalQueueFull24hCount is the part of OverLimit24hCount refused because the global
	// cap and the local queue were full; the rest were over the domain's interval.
	LocalQueueFull24hCount uint64 `json:"local_queue_full_24h_count"`
	// Paced24hCount counts the tasks of a source that paces each domain itself (the local
	// queue) that waited at the limiter for their domain's slot: pacing, not over limit.
	Paced24hCount uint64 `json:"paced_24h_count"`
	// Body24hBytes sums the body bytes of the entry's finished requests.
	Body24hBytes uint64 `json:"body_24h_bytes"`
}

// ProbeCounts are entry C's 24 h counts.
type ProbeCounts struct {
	Probe24hCount            uint64 `json:"probe_24h_count"`
	ReachedOrigin24hCount    uint64 `json:"reached_origin_24h_count"`
	NotReachedOrigin24hCount uint64 `json:"not_reached_origin_24h_count"`
	RenderProbe24hCount      uint64 `json:"render_probe_24h_count"`
	// ReachedFailed24hCount counts probes that reached the origin and failed there.
	ReachedFailed24hCount uint64 `json:"reached_failed_24h_count"`
	// Causes has one row per fail reason of the closed set, in its order, zeros included.
	Causes []CauseCount `json:"causes"`
}

// CauseCount is the number of probes that failed for one reason.
type CauseCount struct {
	FailReason       downloader.FailReason `json:"fail_reason"`
	HasReachedOrigin bool                  `json:"has_reached_origin"`
	Probe24hCount    uint64                `json:"probe_24h_count"`
}

// Counts returns the 24 h counts at now.
func (o *Observer) Counts(now time.Time) Counts {
	var sum hourCounts
	sum.probeReasons = make([]uint64, len(o.reasons)+1)
	o.mu.Lock()
	o.hours.each(now, func(h *hourCounts) {
		for e := range entryCount {
			sum.requests[e] += h.requests[e]
			sum.overLimit[e] += h.overLimit[e]
			sum.queueFull[e] += h.queueFull[e]
			sum.paced[e] += h.paced[e]
			sum.bodyBytes[e] += h.bodyBytes[e]
		}
		sum.probes += h.probes
		sum.notReached += h.notReached
		sum.renderProbes += h.renderProbes
		sum.finished += h.finished
		for i, n := range h.probeReasons {
			sum.probeReasons[i] += n
		}
	})
	o.mu.Unlock()

	c := Counts{Entries: make([]EntryCounts, entryCount), Finished24hCount: sum.finished}
	for i, e := range downloader.Entries {
		c.Entries[i] = EntryCounts{Entry: e, Request24hCount: sum.requests[i],
			OverLimit24hCount: sum.overLimit[i], LocalQueueFull24hCount: sum.queueFull[i], Paced24hCount: sum.paced[i], Body24hBytes: sum.bodyBytes[i]}
		c.Request24hCount += sum.requests[i]
		c.Paced24hCount += sum.paced[i]
		c.OverLimit24hCount += sum.overLimit[i]
	}
	if c.Request24hCount > 0 {
		c.OverLimitRatio = float64(c.OverLimit24hCount) / float64(c.Request24hCount)
	}
	p := &c.Probes
	p.Probe24hCount = sum.probes
	p.NotReachedOrigin24hCount = sum.notReached
	p.ReachedOrigin24hCount = sum.probes - sum.notReached
	p.RenderProbe24hCount = sum.renderProbes
	p.Causes = make([]CauseCount, len(o.reasons))
	for i, r := range o.reasons {
		n := sum.probeReasons[i+1]
		p.Causes[i] = CauseCount{FailReason: r, HasReachedOrigin: r.HasReachedOrigin(), Probe24hCount: n}
		if r.HasReachedOrigin() {
			p.ReachedFailed24hCount += n
		}
	}
	return c
}

// Recent is the throughput of the last RecentSpan.
type Recent struct {
	// SpanSeconds is the window the rate is averaged over: RecentSpan, or the process's
	// uptime while that is shorter (a 12 s-old crawl at 1.2 tasks/s reads 1.2/s, not a
	// 300 s average of 0.05/s).
	SpanSeconds   int64  `json:"span_seconds"`
	FinishedCount uint64 `json:"finished_count"`
	// AchievedRatePerSecond is FinishedCount ÷ SpanSeconds.
	AchievedRatePerSecond float64 `json:"achieved_rate_per_second"`
	// MeanServiceMs is the mean Duration of the requests that finished in the span, or of
	// the last 24 h when none did; null when none did in 24 h either.
	MeanServiceMs *float64 `json:"mean_service_ms"`
	// MeanServiceSpanSeconds is the window MeanServiceMs was measured over: SpanSeconds,
	// or 86400 when nothing finished in the span and the mean is the last 24 h's; 0 when
	// MeanServiceMs is null.
	MeanServiceSpanSeconds int64 `json:"mean_service_span_seconds"`
}

// Recent returns the throughput of the last RecentSpan at now.
func (o *Observer) Recent(now time.Time) Recent {
	var finished, ns, n, dayNs, dayN uint64
	o.mu.Lock()
	o.recent.each(now, func(r *recentCounts) {
		finished += r.finished
		ns += r.serviceNs
		n += r.serviceCount
	})
	if n == 0 {
		o.hours.each(now, func(h *hourCounts) {
			dayNs += h.serviceNs
			dayN += h.serviceCount
		})
	}
	o.mu.Unlock()
	span := min(RecentSpan, max(now.Sub(o.started), time.Second))
	r := Recent{SpanSeconds: int64(math.Ceil(span.Seconds())), FinishedCount: finished}
	r.AchievedRatePerSecond = float64(finished) / span.Seconds()
	switch {
	case n > 0:
		m := float64(ns) / float64(n) / float64(time.Millisecond)
		r.MeanServiceMs = &m
		r.MeanServiceSpanSeconds = r.SpanSeconds
	case dayN > 0:
		m := float64(dayNs) / float64(dayN) / float64(time.Millisecond)
		r.MeanServiceMs = &m
		r.MeanServiceSpanSeconds = int64(24 * time.Hour / time.Second)
	}
	return r
}

// ProbeSample is one recent probe as the probe records page lists it.
type ProbeSample struct {
	ProbedAt         time.Time                 `json:"probed_at"`
	Domain           string                    `json:"domain"`
	URL              string                    `json:"url"`
	ShouldRender     bool                      `json:"should_render"`
	MinIntervalMs    int64                     `json:"min_interval_ms"`
	IntervalSource   downloader.IntervalSource `json:"interval_source"`
	HTTPStatus       *int                      `json:"http_status"`
	RawTextLength    *int                      `json:"raw_text_length"`
	TextLength       *int                      `json:"text_length"`
	HasReachedOrigin bool                      `json:"has_reached_origin"`
	FailReason       *downloader.FailReason    `json:"fail_reason"`
	// ElapsedMs is the probe's service time; null when it was refused over the limit.
	ElapsedMs   *int64 `json:"elapsed_ms"`
	IsOverLimit bool   `json:"is_over_limit"`
}

func sampleOf(ev *downloader.Event, now time.Time) ProbeSample {
	at := ev.At
	if at.IsZero() {
		at = now
	}
	s := ProbeSample{
		ProbedAt: at.UTC(), Domain: ev.Domain, URL: ev.URL, ShouldRender: ev.ShouldRender,
		MinIntervalMs: ev.MinInterval.Milliseconds(), IntervalSource: ev.IntervalSource,
		HTTPStatus: copyPtr(ev.Summary.HTTPStatus), RawTextLength: copyPtr(ev.Summary.RawTextLength),
		TextLength: copyPtr(ev.Summary.TextLength), HasReachedOrigin: ev.Summary.HasReachedOrigin,
		FailReason: copyPtr(ev.Summary.FailReason), IsOverLimit: ev.OverLimit,
	}
	if !ev.OverLimit {
		ms := ev.Duration.Milliseconds()
		s.ElapsedMs = &ms
	}
	return s
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// ProbeSamples returns up to limit of the newest probe samples, newest first.
func (o *Observer) ProbeSamples(limit int) []ProbeSample {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.next
	if o.full {
		n = len(o.samples)
	}
	n = min(n, limit)
	out := make([]ProbeSample, 0, max(n, 0))
	for i := 1; i <= n; i++ {
		out = append(out, o.samples[mod(int64(o.next-i), len(o.samples))])
	}
	return out
}

// logEvent writes one line per probe (Info) and per over-limit event (Info), and one per
// other finished request (Debug), with the field names of the API (SPEC §7).
func (o *Observer) logEvent(ev *downloader.Event) {
	level, msg := slog.LevelDebug, "request"
	switch {
	case ev.Entry == downloader.EntryProbe:
		level, msg = slog.LevelInfo, "probe"
	case ev.OverLimit:
		level, msg = slog.LevelInfo, "over limit"
	case ev.Paced:
		msg = "paced"
	}
	ctx := context.Background()
	if !o.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 16)
	attrs = append(attrs,
		slog.String("entry", string(ev.Entry)),
		slog.String("domain", ev.Domain),
		slog.String("url", ev.URL),
		slog.Bool("should_render", ev.ShouldRender),
		slog.Int64("min_interval_ms", ev.MinInterval.Milliseconds()),
		slog.String("interval_source", string(ev.IntervalSource)),
		slog.Bool("is_over_limit", ev.OverLimit),
	)
	if ev.TaskID != "" {
		attrs = append(attrs, slog.String("task_id", ev.TaskID))
	}
	switch {
	case ev.Paced, ev.OverLimit && ev.Entry == downloader.EntryLease:
		attrs = append(attrs, slog.Int64("delay_ms", ev.Delay.Milliseconds()))
	case ev.OverLimit:
		attrs = append(attrs,
			slog.Any("http_status", nil),
			slog.Bool("has_reached_origin", false),
			slog.Any("fail_reason", ev.Summary.FailReason),
			slog.Int64("retry_after_seconds", retryAfterSeconds(ev.Delay)),
		)
	default:
		s := &ev.Summary
		attrs = append(attrs,
			slog.Any("http_status", s.HTTPStatus),
			slog.Any("raw_text_length", s.RawTextLength),
			slog.Any("text_length", s.TextLength),
			slog.Bool("has_reached_origin", s.HasReachedOrigin),
			slog.Any("fail_reason", s.FailReason),
			slog.Int64("elapsed_ms", ev.Duration.Milliseconds()),
		)
		if s.HealthSignal != nil {
			attrs = append(attrs, slog.Any("health_signal", s.HealthSignal))
		}
	}
	o.log.LogAttrs(ctx, level, msg, attrs...)
}

// retryAfterSeconds rounds a wait up to whole seconds, at least 1, as entry B's 429 does.
func retryAfterSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

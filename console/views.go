package console

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"downloader"
	"downloader/observe"
)

// Runtime is the domain runtime page's status and over-limit table
// (GET /v1/console/runtime). Counts are over the last 24 hours.
type Runtime struct {
	GeneratedAt time.Time `json:"generated_at"`
	// DomainCount counts the domains in downloader:domain_runtime: those this service has
	// requested and that still hold a 24 h statistic or could still refuse a request.
	DomainCount int `json:"domain_count"`
	// InFlightCount sums the per-domain in_flight_count column: admitted and not done.
	InFlightCount        int    `json:"in_flight_count"`
	MaxConcurrentCount   int    `json:"max_concurrent_count"`
	DefaultMinIntervalMs int64  `json:"default_min_interval_ms"`
	Request24hCount      uint64 `json:"request_24h_count"`
	OverLimit24hCount    uint64 `json:"over_limit_24h_count"`
	// OverLimitRatio is OverLimit24hCount ÷ Request24hCount (the page shows a percentage).
	OverLimitRatio float64 `json:"over_limit_ratio"`
	// Paced24hCount counts the local queue's tasks that waited for their domain's slot:
	// its own pacing, shown apart and never part of the ratio or the over-limit state.
	Paced24hCount uint64                `json:"paced_24h_count"`
	Entries       []observe.EntryCounts `json:"entries"`
	// LocalQueue is the local queue's progress (null when a scheduler feeds entry A).
	LocalQueue *LocalQueueStatus `json:"local_queue"`
	// Egress is this instance's egress detector (nil without one).
	Egress *downloader.EgressState `json:"egress"`
	// Cluster lists the instances sharing the TiKV store (cluster mode); nil on the
	// embedded store (one machine).
	Cluster *ClusterStatus `json:"cluster"`
}

// ClusterStatus is the instance list of the runtime page (cluster mode).
type ClusterStatus struct {
	InstanceID        string                       `json:"instance_id"` // the instance serving the page
	LiveInstanceCount int                          `json:"live_instance_count"`
	Instances         []downloader.ClusterInstance `json:"instances"`
	// Error says why the list could not be read (TiKV unreachable); "" when it was.
	Error string `json:"error,omitempty"`
}

// Runtime returns the domain runtime page's numbers now, without the instance list (see
// RuntimeOf).
func (c *Console) Runtime() Runtime {
	now := c.cfg.Clock.Now()
	st := c.cfg.Limiter.Stats(now)
	counts := c.cfg.Observer.Counts(now)
	rt := Runtime{
		GeneratedAt: now.UTC(), DomainCount: st.DomainCount, InFlightCount: st.InFlightCount,
		MaxConcurrentCount:   c.cfg.Settings.Settings().MaxConcurrentCount,
		DefaultMinIntervalMs: c.cfg.Settings.DefaultMinInterval().Milliseconds(),
		Request24hCount:      counts.Request24hCount, OverLimit24hCount: counts.OverLimit24hCount,
		OverLimitRatio: counts.OverLimitRatio, Paced24hCount: counts.Paced24hCount, Entries: counts.Entries,
	}
	if c.cfg.Egress != nil {
		if eg, ok := c.cfg.Egress(now); ok {
			rt.Egress = &eg
		}
	}
	if c.cfg.LocalQueue != nil {
		if q, ok := c.cfg.LocalQueue(); ok {
			rt.LocalQueue = localQueueStatus(q, counts, c.cfg.Observer.Recent(now))
		}
	}
	return rt
}

// LocalQueueStatus is the queue panel: the local queue's tasks by state, what is left and
// when it should be done, retries, robots.txt skips and the bytes fetched.
type LocalQueueStatus struct {
	observe.QueueCounts
	// DiscoveredCount is every task queued (listed or discovered); RemainingCount those
	// pending or leased; FetchedCount those fetched (done_count).
	DiscoveredCount int `json:"discovered_count"`
	FetchedCount    int `json:"fetched_count"`
	RemainingCount  int `json:"remaining_count"`
	// Body24hBytes sums entry A's body bytes of the last 24 h.
	Body24hBytes uint64 `json:"body_24h_bytes"`
	// AchievedRatePerSecond is the finishing rate over the recent window (or the
	// process's uptime while shorter); EtaSeconds is RemainingCount at that rate, null
	// while nothing finished yet.
	AchievedRatePerSecond float64 `json:"achieved_rate_per_second"`
	EtaSeconds            *int64  `json:"eta_seconds"`
}

func localQueueStatus(q observe.QueueCounts, counts observe.Counts, recent observe.Recent) *LocalQueueStatus {
	s := &LocalQueueStatus{QueueCounts: q, DiscoveredCount: q.TotalCount(), FetchedCount: q.DoneCount,
		RemainingCount: q.RemainingCount(), AchievedRatePerSecond: recent.AchievedRatePerSecond}
	for _, e := range counts.Entries {
		if e.Entry == downloader.EntryLease {
			s.Body24hBytes = e.Body24hBytes
		}
	}
	if recent.AchievedRatePerSecond > 0 {
		eta := int64(math.Ceil(float64(s.RemainingCount) / recent.AchievedRatePerSecond))
		s.EtaSeconds = &eta
	}
	return s
}

// Percent is the share of discovered tasks that finished (fetched or skipped).
func (s *LocalQueueStatus) Percent() float64 {
	if s.DiscoveredCount == 0 {
		return 0
	}
	return 100 * float64(s.DoneCount+s.SkippedCount) / float64(s.DiscoveredCount)
}

// RuntimeOf is Runtime with the cluster's instance list, read from TiKV within ctx (cluster
// mode); a failed read is shown, not fatal: the page is most needed when TiKV is down.
func (c *Console) RuntimeOf(ctx context.Context) Runtime {
	rt := c.Runtime()
	cv := c.cfg.Cluster
	if cv == nil {
		return rt
	}
	cs := &ClusterStatus{InstanceID: cv.InstanceID(), Instances: []downloader.ClusterInstance{}}
	list, err := cv.Instances(ctx)
	if err != nil {
		c.log.Warn("console: instance list", "error", err)
		cs.Error = downloader.ErrorMessage(err)
	}
	for _, in := range list {
		cs.Instances = append(cs.Instances, in)
		if in.IsLive {
			cs.LiveInstanceCount++
		}
	}
	rt.Cluster = cs
	return rt
}

// Probes is the probe records page's numbers (GET /v1/console/probes).
type Probes struct {
	GeneratedAt time.Time `json:"generated_at"`
	observe.ProbeCounts
	// Samples are the newest probes, newest first.
	Samples []observe.ProbeSample `json:"samples"`
}

// Probes returns the probe records page's numbers now, with up to limit samples.
func (c *Console) Probes(limit int) Probes {
	now := c.cfg.Clock.Now()
	return Probes{GeneratedAt: now.UTC(), ProbeCounts: c.cfg.Observer.Counts(now).Probes,
		Samples: c.cfg.Observer.ProbeSamples(limit)}
}

// Stats is the fetch statistics page's numbers (GET /v1/console/stats).
type Stats struct {
	GeneratedAt time.Time `json:"generated_at"`
	observe.Ceilings
	DomainCount          int      `json:"domain_count"`
	ActiveDomainCount    int      `json:"active_domain_count"`
	UnboundedDomainCount int      `json:"unbounded_domain_count"`
	ActiveSpanSeconds    int64    `json:"active_span_seconds"`
	SpanSeconds          int64    `json:"span_seconds"` // of the achieved rate and mean service time
	FinishedCount        uint64   `json:"finished_count"`
	MeanServiceMs        *float64 `json:"mean_service_ms"`
	// MeanServiceSpanSeconds: the window of MeanServiceMs (observe.Recent).
	MeanServiceSpanSeconds int64 `json:"mean_service_span_seconds"`
	MaxConcurrentCount     int   `json:"max_concurrent_count"`
	// GlobalInFlightCount counts the requests holding one of the max_concurrent_count
	// slots; QueuedCount those waiting for one (at most LocalQueueLength for B and C).
	GlobalInFlightCount int `json:"global_in_flight_count"`
	QueuedCount         int `json:"queued_count"`
	LocalQueueLength    int `json:"local_queue_length"`
	// Renderer is the renderer pool; null when the service has none.
	Renderer *downloader.RendererStats `json:"renderer"`
}

// Stats returns the fetch statistics page's numbers now.
func (c *Console) Stats() Stats {
	now := c.cfg.Clock.Now()
	d := c.cfg.Domains.Summary(now)
	r := c.cfg.Observer.Recent(now)
	gate := c.cfg.Gate
	cap := c.cfg.Settings.Settings().MaxConcurrentCount
	s := Stats{
		GeneratedAt: now.UTC(), Ceilings: observe.CeilingsOf(d, r, cap),
		DomainCount: d.DomainCount, ActiveDomainCount: d.ActiveDomainCount, UnboundedDomainCount: d.UnboundedDomainCount,
		ActiveSpanSeconds: int64(observe.ActiveSpan / time.Second),
		SpanSeconds:       r.SpanSeconds, FinishedCount: r.FinishedCount, MeanServiceMs: r.MeanServiceMs,
		MeanServiceSpanSeconds: r.MeanServiceSpanSeconds, MaxConcurrentCount: cap,
		GlobalInFlightCount: gate.InFlight(), QueuedCount: gate.Waiting(), LocalQueueLength: gate.QueueLength(),
	}
	if c.cfg.Renderer != nil {
		rs := c.cfg.Renderer()
		s.Renderer = &rs
	}
	return s
}

// Base is what every page shows around its content.
// The views embed the JSON struct of their page, whose GeneratedAt the layout shows.
type Base struct {
	Page string
	// Role is the signed-in session's role ("api" or "admin"), "" without a session;
	// CSRFToken goes with every write the page's controls make with that session.
	Role      string
	CSRFToken string
}

func (b *Base) setSession(role, csrf string) { b.Role, b.CSRFToken = role, csrf }

// OverLimit levels of the 24 h share of over-limit events, as the runtime page words it.
// The seeds' normal is 0.35%; the DownloaderOverLimitSpike alert (monitoring/alerts.yml)
// fires above 5%.
const (
	overLimitUsualRatio = 0.01
	overLimitAlertRatio = 0.05
)

type errorView struct {
	Base
	GeneratedAt time.Time
	Error       string
	Field       string
}

// entryRow is one row of the over-limit table.
type entryRow struct {
	observe.EntryCounts
	Name, Behavior, Why, WhyEn string
}

func entryRows(counts []observe.EntryCounts) []entryRow {
	rows := make([]entryRow, 0, len(counts))
	for _, e := range counts {
		r := entryRow{EntryCounts: e}
		switch e.Entry {
		case downloader.EntryLease:
			r.Name, r.Behavior = "A · lease loop · lease 循环", "delay · 延迟执行"
			r.WhyEn = "The task is already leased: dropping it costs a lease timeout, waiting is cheaper; a wait that would outlive the lease hands the task back at once."
			r.Why = "任务已经租下来了，丢掉要等 lease 超时才回收，等一下更便宜；等待会超过 lease 时立刻交还调度器"
		case downloader.EntryRender:
			r.Name, r.Behavior = "B · POST /v1/render", "429 + retry_after_seconds"
			r.WhyEn = "A synchronous API: the caller can back off by itself."
			r.Why = "同步接口，调用方能自己退避"
		case downloader.EntryProbe:
			r.Name, r.Behavior = "C · POST /v1/probe", "has_reached_origin = false"
			r.WhyEn = "No 429. The probe was stopped by our own limiter, not by the site: the scheduler neither backs off nor counts the probe."
			r.Why = "不返回 429。探针被我方自己的限速挡住，不是对方的问题：调度器不退避、不计探针次数"
		}
		rows = append(rows, r)
	}
	return rows
}

// runtimeView is the domain runtime page.
type runtimeView struct {
	Base
	Runtime
	Charts    []chart
	EntryRows []entryRow
	Domains   observe.DomainPage
	Query     observe.DomainQuery
	Columns   []column
}

// column is a sortable column of the per-domain table.
type column struct {
	Key, Label string
	Href       string // sorts by this column (toggles the order if it is the current one)
	Mark       string // ▲ or ▼ on the current column
}

func (c *Console) runtimePage(r *http.Request) (any, error) {
	q, err := DomainQueryOf(r.URL.Query())
	if err != nil {
		return nil, err
	}
	page, err := c.cfg.Domains.Page(c.cfg.Clock.Now(), q)
	if err != nil {
		return nil, err
	}
	rt := c.RuntimeOf(r.Context())
	v := &runtimeView{Base: Base{Page: "runtime"}, Runtime: rt, Charts: requestCharts(c.cfg.Observer.Hours(c.cfg.Clock.Now())),
		EntryRows: entryRows(rt.Entries), Domains: page, Query: q}
	labels := map[string]string{
		observe.SortDomain: "域名", observe.SortMinInterval: "最小请求间隔（毫秒）", observe.SortIntervalSource: "间隔来源",
		observe.SortLastRequest: "最后一次请求时间", observe.SortInFlight: "进行中请求数", observe.SortRequests: "24h 请求数",
		observe.SortState: "状态",
	}
	for _, k := range observe.SortKeys() {
		col := column{Key: k, Label: labels[k]}
		desc := defaultDescending(k)
		if k == q.Sort {
			desc = !q.Descending
			col.Mark = "▲"
			if q.Descending {
				col.Mark = "▼"
			}
		}
		col.Href = v.href(k, desc, "")
		v.Columns = append(v.Columns, col)
	}
	return v, nil
}

// OverLimitLevel words the 24 h over-limit share: none (no request yet), usual (at most
// 1%), elevated (up to the alert's 5%) or high.
func (v *runtimeView) OverLimitLevel() string {
	switch {
	case v.Request24hCount == 0:
		return "none"
	case v.OverLimitRatio <= overLimitUsualRatio:
		return "usual"
	case v.OverLimitRatio <= overLimitAlertRatio:
		return "elevated"
	}
	return "high"
}

// href links to the runtime page with the current search and limit.
func (v *runtimeView) href(sort string, desc bool, cursor string) string {
	p := url.Values{}
	p.Set("sort", sort)
	p.Set("order", map[bool]string{false: "asc", true: "desc"}[desc])
	if v.Query.Search != "" {
		p.Set("q", v.Query.Search)
	}
	if v.Query.Limit != observe.DefaultPageLimit {
		p.Set("limit", strconv.Itoa(v.Query.Limit))
	}
	if cursor != "" {
		p.Set("cursor", cursor)
	}
	return "/?" + p.Encode() + "#domains"
}

// NextHref links to the next page, or is empty on the last one.
func (v *runtimeView) NextHref() string {
	if v.Domains.NextCursor == nil {
		return ""
	}
	return v.href(v.Query.Sort, v.Query.Descending, *v.Domains.NextCursor)
}

// FirstHref links to the first page, or is empty on it.
func (v *runtimeView) FirstHref() string {
	if v.Query.Cursor == "" {
		return ""
	}
	return v.href(v.Query.Sort, v.Query.Descending, "")
}

// causeRow is one row of the probe cause table.
type causeRow struct {
	Key      string // data-row key
	Field    string // the JSON field its count comes from
	Reason   downloader.FailReason
	Label    string
	Count    uint64
	Action   string
	IsDetail bool // a reached-but-failed reason under the total
}

type probesView struct {
	Base
	Probes
	Charts []chart
	Causes []causeRow
}

func (c *Console) probesPage(r *http.Request) (any, error) {
	n, err := intParam(r.URL.Query(), "limit", DefaultSampleLimit, 1, observe.DefaultSampleCount)
	if err != nil {
		return nil, err
	}
	p := c.Probes(n)
	v := &probesView{Base: Base{Page: "probes"}, Probes: p, Charts: probeCharts(c.cfg.Observer.Hours(c.cfg.Clock.Now()))}
	const noBackoff = "no backoff, not counted in probe_count, retried as is · 不退避、不计 probe_count、原地重试"
	first := true
	var reached []causeRow
	for _, cc := range p.Causes {
		row := causeRow{Key: "cause:" + string(cc.FailReason), Field: "probe_24h_count", Reason: cc.FailReason,
			Label: cc.FailReason.EnglishLabel() + " · " + cc.FailReason.Label(), Count: cc.Probe24hCount}
		if cc.HasReachedOrigin {
			row.IsDetail = true
			reached = append(reached, row)
			continue
		}
		row.Action = "the same · 同上"
		if first {
			row.Action, first = noBackoff, false
		}
		v.Causes = append(v.Causes, row)
	}
	v.Causes = append(v.Causes, causeRow{Key: "cause:reached_failed", Field: "reached_failed_24h_count",
		Label: "reached the site, failed there · 到达对方但失败", Count: p.ReachedFailed24hCount, Action: "normal backoff · 正常退避"})
	v.Causes = append(v.Causes, reached...)
	return v, nil
}

type statsView struct {
	Base
	Stats
	Charts []chart
}

func (c *Console) statsPage(r *http.Request) (any, error) {
	s := c.Stats()
	return &statsView{Base: Base{Page: "stats"}, Stats: s, Charts: renderCharts(c.cfg.Observer.Hours(c.cfg.Clock.Now()))}, nil
}

// Template helpers: numbers as the seeds print them (128,540; 0.35%), null as null.

func funcs() map[string]any {
	return map[string]any{
		"num":      num,
		"bytes":    byteSize,
		"duration": func(s int64) string { return (time.Duration(s) * time.Second).String() },
		"fixed":    fixed,
		"optFixed": optFixed,
		"pct":      func(ratio float64) string { return fixed(ratio*100, 2) + "%" },
		"ts":       ts,
		"optTs": func(t *time.Time) string {
			if t == nil {
				return "—"
			}
			return ts(*t)
		},
		"optInt": func(p *int) string {
			if p == nil {
				return "null"
			}
			return num(*p)
		},
		"reasonLabel": func(r *downloader.FailReason) string {
			if r == nil {
				return "—"
			}
			return r.EnglishLabel() + " · " + r.Label()
		},
		"reasonValue": func(r *downloader.FailReason) string {
			if r == nil {
				return "null"
			}
			return string(*r)
		},
		"sourceLabel": sourceLabel,
		"stateLabel":  stateLabel,
		"fenceLabel":  fenceLabel,
		"entryLabel":  entryLabel,
		"bindingLabel": func(b *observe.Binding) string {
			switch {
			case b == nil:
				return "—"
			case *b == observe.BindingPoliteness:
				return "politeness礼貌上限"
			default:
				return "capacity容量上限"
			}
		},
		"bindingValue": func(b *observe.Binding) string {
			if b == nil {
				return "null"
			}
			return string(*b)
		},
		"limits": func(cur int) []int {
			l := []int{20, 50, 100, 200, 500}
			if !slices.Contains(l, cur) {
				l = append(l, cur)
				slices.Sort(l)
			}
			return l
		},
	}
}

// num prints an integer with thousands separators.
func num(v any) string {
	var s string
	switch n := v.(type) {
	case int:
		s = strconv.Itoa(n)
	case int32:
		s = strconv.FormatInt(int64(n), 10)
	case int64:
		s = strconv.FormatInt(n, 10)
	case uint32:
		s = strconv.FormatUint(uint64(n), 10)
	case uint64:
		s = strconv.FormatUint(n, 10)
	case *int64: // an optional number: empty when absent
		if n == nil {
			return ""
		}
		s = strconv.FormatInt(*n, 10)
	default:
		return "?"
	}
	return group(s)
}

func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// fixed prints a float with d decimals and thousands separators.
func fixed(f float64, d int) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "—"
	}
	s := strconv.FormatFloat(f, 'f', d, 64)
	whole, frac, _ := strings.Cut(s, ".")
	if frac != "" {
		return group(whole) + "." + frac
	}
	return group(whole)
}

func optFixed(p *float64, d int) string {
	if p == nil {
		return "—"
	}
	return fixed(*p, d)
}

// ts shows an instant, or "—" for none (the zero time: e.g. no request known).
func ts(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format(time.RFC3339)
}

func sourceLabel(s downloader.IntervalSource) string {
	switch s {
	case downloader.IntervalSourceLease:
		return "lease message · lease 消息"
	case downloader.IntervalSourceRequest:
		return "given by the caller · 调用方给定"
	case downloader.IntervalSourceDefault:
		return "global default · 全局默认"
	}
	return string(s)
}

// stateLabel words a domain's rate-limit state as an operator reads it: what happened to
// the requests over its interval in the last 5 minutes, English then Chinese.
func stateLabel(s downloader.RateState) [2]string {
	switch s {
	case downloader.RateStateNormal:
		return [2]string{"ok", "正常"}
	case downloader.RateStateOverLimitA:
		return [2]string{"rate-limited: tasks delayed (A)", "入口 A 超限，延迟执行"}
	case downloader.RateStateOverLimitB:
		return [2]string{"rate-limited: renders answered 429 (B)", "入口 B 超限，返回 429"}
	case downloader.RateStateOverLimitC:
		return [2]string{"rate-limited: probes not sent (C)", "入口 C 超限，探针未发出"}
	}
	return [2]string{string(s), ""}
}

// fenceLabel says in words, English and Chinese, why an instance admits nothing (its
// fence_reason), or that it admits.
func fenceLabel(in downloader.ClusterInstance) [2]string {
	if !in.IsFenced {
		return [2]string{"admitting", "正常放行"}
	}
	switch in.FenceReason {
	case downloader.FenceHeartbeatLate:
		return [2]string{"fenced: heartbeat late, admits nothing until one commits", "已隔离：心跳逾期，心跳恢复前不放行"}
	case downloader.FenceClockSkewed:
		return [2]string{"fenced: clock off PD by more than half of max_clock_skew_ms (check NTP)", "已隔离：时钟偏差超过 max_clock_skew_ms 的一半（检查 NTP）"}
	case downloader.FenceNotRegistered:
		return [2]string{"fenced: not registered yet", "已隔离：尚未注册"}
	case downloader.FenceInstanceIDTakenOver:
		return [2]string{"fenced for good: another process took its instance_id (stop it)", "永久隔离：另一进程占用了其 instance_id（请停止本进程）"}
	}
	return [2]string{"fenced: " + in.FenceReason, "已隔离"}
}

func entryLabel(e downloader.Entry) string {
	switch e {
	case downloader.EntryLease:
		return "A · lease 循环"
	case downloader.EntryRender:
		return "B · POST /v1/render"
	case downloader.EntryProbe:
		return "C · POST /v1/probe"
	}
	return string(e)
}

// byteSize writes n bytes in binary units (KiB, MiB, GiB) with one decimal.
func byteSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[i])
}

package console

import (
	"math"
	"strconv"
	"time"

	"downloader/observe"
)

// The 24 h charts: one bar per hour, drawn on the server as inline SVG (no script, no
// library, nothing fetched), so a page reads at a glance even with scripts off. The
// numbers come from the observer's hourly buckets, the same ones the 24 h counts sum.

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartWidth   = 720
	chartPlot    = 120 // height of the bars' area
	chartTop     = 8
	chartBottom  = 22 // the hour labels
	chartLeft    = 64 // the scale's labels
	chartBarSlot = (chartWidth - chartLeft) / observe.HourBuckets
	chartBarGap  = 4
)

type chart struct {
	ID            string // data-row "chart:ID"
	Title, Label  string // English, Chinese
	Total         string // shown beside the title (data-field chart_total)
	TotalName     string // what Total is
	Width, Height int
	PlotTop       int
	PlotBottom    int
	PlotHeight    int
	Left          int
	MaxLabel      string
	Bars          []chartBar
	Ticks         []chartTick
	Legend        []chartLegend
	IsEmpty       bool
}

type chartBar struct {
	StartAt  string // RFC 3339
	Title    string // the tooltip
	X, Width float64
	Segments []chartSegment
}

type chartSegment struct {
	Class     string
	Y, Height float64
	Value     string
}

type chartTick struct {
	X     float64
	Label string
}

type chartLegend struct{ Class, Label string }

// series is one stacked part of every bar.
type series struct {
	class, label string
	value        func(observe.Hour) (float64, bool) // false: no value this hour
}

// newChart lays out hours as bars of the stacked series; format prints a value.
func newChart(id, title, label string, hours []observe.Hour, format func(float64) string, parts ...series) chart {
	c := chart{ID: id, Title: title, Label: label, Width: chartWidth, Height: chartTop + chartPlot + chartBottom,
		PlotTop: chartTop, PlotBottom: chartTop + chartPlot, PlotHeight: chartPlot, Left: chartLeft}
	peak := 0.0
	for _, h := range hours {
		sum := 0.0
		for _, p := range parts {
			if v, ok := p.value(h); ok {
				sum += v
			}
		}
		peak = math.Max(peak, sum)
	}
	c.IsEmpty = peak == 0
	scale := niceCeil(peak)
	c.MaxLabel = format(scale)
	for _, p := range parts {
		if len(parts) > 1 {
			c.Legend = append(c.Legend, chartLegend{Class: p.class, Label: p.label})
		}
	}
	for i, h := range hours {
		x := float64(chartLeft + i*chartBarSlot + chartBarGap/2)
		b := chartBar{StartAt: ts(h.StartAt), X: x, Width: chartBarSlot - chartBarGap}
		b.Title = h.StartAt.UTC().Format("15:04") + " UTC"
		y := float64(chartTop + chartPlot)
		for _, p := range parts {
			v, ok := p.value(h)
			if !ok {
				b.Title += " · " + p.label + " —"
				continue
			}
			b.Title += " · " + p.label + " " + format(v)
			height := 0.0
			if scale > 0 {
				height = v / scale * chartPlot
			}
			y -= height
			b.Segments = append(b.Segments, chartSegment{Class: p.class, Y: round1(y), Height: round1(height), Value: format(v)})
		}
		c.Bars = append(c.Bars, b)
		if h.StartAt.UTC().Hour()%6 == 0 {
			c.Ticks = append(c.Ticks, chartTick{X: x + float64(chartBarSlot-chartBarGap)/2, Label: h.StartAt.UTC().Format("15:04")})
		}
	}
	return c
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }

// niceCeil rounds a chart's peak up to 1, 2 or 5 times a power of ten, so the scale
// reads as a round number.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func countOf(f func(observe.Hour) uint64) func(observe.Hour) (float64, bool) {
	return func(h observe.Hour) (float64, bool) { return float64(f(h)), true }
}

func wholeNumber(v float64) string { return group(strconv.FormatInt(int64(math.Round(v)), 10)) }

func milliseconds(v float64) string {
	if v >= 10000 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + " s"
	}
	return wholeNumber(v) + " ms"
}

// The charts of each page.

func requestCharts(hours []observe.Hour) []chart {
	var req, over uint64
	for _, h := range hours {
		req += h.RequestCount
		over += h.OverLimitCount
	}
	requests := newChart("requests", "requests per hour", "每小时请求数", hours, wholeNumber,
		series{"bar", "requests", countOf(func(h observe.Hour) uint64 { return h.RequestCount })})
	requests.Total, requests.TotalName = num(req), "request_24h_count"
	triggers := newChart("over_limit", "limit triggers per hour", "每小时限速触发", hours, wholeNumber,
		series{"bar warn", "limit triggers", countOf(func(h observe.Hour) uint64 { return h.OverLimitCount })})
	triggers.Total, triggers.TotalName = num(over), "over_limit_24h_count"
	return []chart{requests, triggers}
}

func probeCharts(hours []observe.Hour) []chart {
	var reached, not uint64
	for _, h := range hours {
		reached += h.ProbeReachedCount
		not += h.ProbeNotReachedCount
	}
	c := newChart("probes", "probes per hour: reached / not reached", "每小时探针：到达 / 未到达对方", hours, wholeNumber,
		series{"bar ok", "has_reached_origin=true", countOf(func(h observe.Hour) uint64 { return h.ProbeReachedCount })},
		series{"bar own", "has_reached_origin=false", countOf(func(h observe.Hour) uint64 { return h.ProbeNotReachedCount })})
	c.Total, c.TotalName = num(reached+not), "probe_24h_count"
	return []chart{c}
}

func renderCharts(hours []observe.Hour) []chart {
	var n uint64
	for _, h := range hours {
		n += h.RenderCount
	}
	c := newChart("render_latency", "mean render time per hour", "每小时平均渲染耗时", hours, milliseconds,
		series{"bar", "mean_render_ms", func(h observe.Hour) (float64, bool) {
			if h.MeanRenderMs == nil {
				return 0, false
			}
			return *h.MeanRenderMs, true
		}})
	c.Total, c.TotalName = num(n), "render_24h_count"
	return []chart{c}
}

// Hours is the JSON of the charts (GET /v1/console/hours).
type Hours struct {
	GeneratedAt time.Time      `json:"generated_at"`
	Hours       []observe.Hour `json:"hours"`
}

// Hours returns the 24 hourly buckets now.
func (c *Console) Hours() Hours {
	now := c.cfg.Clock.Now()
	return Hours{GeneratedAt: now.UTC(), Hours: c.cfg.Observer.Hours(now)}
}

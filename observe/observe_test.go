package observe

import (
	"bytes"
	"downloader/clock/clocktest"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"downloader"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC)

const (
	entryA = downloader.EntryLease
	entryB = downloader.EntryRender
	entryC = downloader.EntryProbe
)

func ptr[T any](v T) *T { return &v }

// finished is a finished request of entry e that took d.
func finished(e downloader.Entry, d time.Duration, reason downloader.FailReason) *downloader.Event {
	out := &downloader.Outcome{FailReason: reason}
	if reason == "" || reason == downloader.FailHTTPStatusError {
		out.HTTPStatus = 200
		if reason != "" {
			out.HTTPStatus = 502
		}
		out.RawTextLength = ptr(12)
	}
	return &downloader.Event{Entry: e, URL: "https://news.example.tw/", Domain: "news.example.tw",
		MinInterval: time.Second, IntervalSource: downloader.IntervalSourceRequest,
		Summary: out.Summary("news.example.tw"), Duration: d}
}

// refused is an over-limit event of entry e.
func refused(e downloader.Entry, reason downloader.FailReason) *downloader.Event {
	ev := &downloader.Event{Entry: e, URL: "https://blog.example.com/", Domain: "blog.example.com",
		MinInterval: time.Second, IntervalSource: downloader.IntervalSourceDefault, OverLimit: true, Delay: 1500 * time.Millisecond}
	if e != entryA {
		s := downloader.Failed(reason).Summary(ev.Domain)
		s.HealthSignal = nil
		ev.Summary = s
	}
	return ev
}

// paced turns entry A's delay into a wait of the local queue's pacing.
func paced(ev *downloader.Event) *downloader.Event { ev.OverLimit, ev.Paced = false, true; return ev }

func renderProbe(ev *downloader.Event) *downloader.Event { ev.ShouldRender = true; return ev }

func TestCounts(t *testing.T) {
	type step struct {
		after time.Duration // since t0
		ev    *downloader.Event
	}
	tests := []struct {
		name  string
		steps []step
		at    time.Duration
		check func(t *testing.T, c Counts)
	}{{
		name: "requests and over-limit events per entry",
		steps: []step{
			{0, finished(entryA, time.Second, "")},
			{0, refused(entryA, "")},        // a delay: not a request of its own
			{0, paced(refused(entryA, ""))}, // the local queue's pacing: neither
			{time.Minute, finished(entryA, time.Second, "")},
			{time.Minute, finished(entryB, time.Second, "")},
			{time.Minute, refused(entryB, downloader.FailSelfRateLimited)},
			{time.Minute, refused(entryB, downloader.FailLocalQueueFull)},
			{2 * time.Minute, refused(entryC, downloader.FailSelfRateLimited)},
			{2 * time.Minute, finished(entryC, time.Second, "")},
		},
		at: time.Hour,
		check: func(t *testing.T, c Counts) {
			want := []EntryCounts{
				{Entry: entryA, Request24hCount: 2, OverLimit24hCount: 1, Paced24hCount: 1},
				{Entry: entryB, Request24hCount: 3, OverLimit24hCount: 2, LocalQueueFull24hCount: 1},
				{Entry: entryC, Request24hCount: 2, OverLimit24hCount: 1},
			}
			for i, w := range want {
				if c.Entries[i] != w {
					t.Errorf("entry %s: %+v, want %+v", w.Entry, c.Entries[i], w)
				}
			}
			if c.Request24hCount != 7 || c.OverLimit24hCount != 4 || c.Finished24hCount != 4 {
				t.Errorf("totals: %+v", c)
			}
			if c.Paced24hCount != 1 {
				t.Errorf("paced_24h_count %d, want 1", c.Paced24hCount)
			}
			if c.OverLimitRatio != 4.0/7.0 {
				t.Errorf("ratio %v, want 4/7", c.OverLimitRatio)
			}
		},
	}, {
		name: "probes by outcome",
		steps: []step{
			{0, finished(entryC, time.Second, "")},
			{0, renderProbe(finished(entryC, time.Second, ""))},
			{0, finished(entryC, time.Second, downloader.FailHTTPStatusError)},
			{0, finished(entryC, time.Second, downloader.FailRendererUnavailable)},
			{0, refused(entryC, downloader.FailSelfRateLimited)},
			{0, refused(entryC, downloader.FailLocalQueueFull)},
			{0, finished(entryB, time.Second, downloader.FailConnectRefused)}, // not a probe
		},
		at: 0,
		check: func(t *testing.T, c Counts) {
			p := c.Probes
			if p.Probe24hCount != 6 || p.ReachedOrigin24hCount != 3 || p.NotReachedOrigin24hCount != 3 ||
				p.RenderProbe24hCount != 1 || p.ReachedFailed24hCount != 1 {
				t.Errorf("overview %+v", p)
			}
			got := map[downloader.FailReason]uint64{}
			for _, cc := range p.Causes {
				if cc.HasReachedOrigin != cc.FailReason.HasReachedOrigin() {
					t.Errorf("%s: has_reached_origin %v", cc.FailReason, cc.HasReachedOrigin)
				}
				if cc.Probe24hCount > 0 {
					got[cc.FailReason] = cc.Probe24hCount
				}
			}
			want := map[downloader.FailReason]uint64{downloader.FailHTTPStatusError: 1, downloader.FailRendererUnavailable: 1,
				downloader.FailSelfRateLimited: 1, downloader.FailLocalQueueFull: 1}
			if len(got) != len(want) {
				t.Errorf("causes %v, want %v", got, want)
			}
			for r, n := range want {
				if got[r] != n {
					t.Errorf("cause %s = %d, want %d", r, got[r], n)
				}
			}
			if len(p.Causes) != len(downloader.FailReasons()) {
				t.Errorf("%d cause rows, want the whole closed set", len(p.Causes))
			}
		},
	}, {
		name: "the window keeps the current hour and the 23 before it",
		steps: []step{
			{0, finished(entryB, time.Second, "")},                // hour 0
			{59 * time.Minute, finished(entryB, time.Second, "")}, // hour 0
			{time.Hour, finished(entryB, time.Second, "")},        // hour 1
			{23 * time.Hour, finished(entryC, time.Second, "")},   // hour 23
			{24*time.Hour + time.Minute, refused(entryA, "")},     // hour 24: hour 0 leaves
			{24*time.Hour + 2*time.Minute, refused(entryC, downloader.FailSelfRateLimited)},
		},
		at: 24*time.Hour + 30*time.Minute,
		check: func(t *testing.T, c Counts) {
			if c.Entries[1].Request24hCount != 1 {
				t.Errorf("B: %d requests, want 1 (hour 0 has left the window)", c.Entries[1].Request24hCount)
			}
			if c.Probes.Probe24hCount != 2 || c.Entries[0].OverLimit24hCount != 1 {
				t.Errorf("%+v", c)
			}
		},
	}, {
		name:  "everything is gone a day later",
		steps: []step{{0, finished(entryB, time.Second, "")}, {time.Hour, finished(entryC, time.Second, "")}},
		at:    26 * time.Hour,
		check: func(t *testing.T, c Counts) {
			if c.Request24hCount != 0 || c.Probes.Probe24hCount != 0 || c.OverLimitRatio != 0 {
				t.Errorf("%+v", c)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.NewFake(t0)
			o := New(Config{Clock: clk})
			for _, s := range tt.steps {
				clk.Set(t0.Add(s.after))
				o.Observe(s.ev)
			}
			clk.Set(t0.Add(tt.at))
			tt.check(t, o.Counts(clk.Now()))
		})
	}
}

func TestRecent(t *testing.T) {
	clk := clocktest.NewFake(t0)
	o := New(Config{Clock: clk})
	if r := o.Recent(clk.Now()); r.FinishedCount != 0 || r.MeanServiceMs != nil || r.AchievedRatePerSecond != 0 {
		t.Fatalf("empty: %+v", r)
	}
	// 60 requests over a minute, 100 ms and 300 ms alternately; over-limit events do not
	// count as achieved.
	for i := range 60 {
		clk.Set(t0.Add(time.Duration(i) * time.Second))
		d := 100 * time.Millisecond
		if i%2 == 1 {
			d = 300 * time.Millisecond
		}
		o.Observe(finished(entryB, d, ""))
		o.Observe(refused(entryB, downloader.FailSelfRateLimited))
	}
	// The observer is a minute old: the rate is averaged over that minute, not over the
	// five-minute window it has not lived through.
	r := o.Recent(t0.Add(time.Minute))
	if r.FinishedCount != 60 || r.AchievedRatePerSecond != 1 || r.SpanSeconds != 60 {
		t.Errorf("rate of a young process: %+v, want 60 over its 60 s uptime", r)
	}
	if r := o.Recent(t0.Add(5*time.Minute + 30*time.Second)); r.SpanSeconds != 300 || r.FinishedCount == 0 || r.AchievedRatePerSecond != float64(r.FinishedCount)/300 {
		t.Errorf("rate once older than the window: %+v, want the count over 300 s", r)
	}
	if r.MeanServiceMs == nil || *r.MeanServiceMs != 200 || r.MeanServiceSpanSeconds != r.SpanSeconds {
		t.Errorf("mean service %v (over %d s), want 200 ms", r.MeanServiceMs, r.MeanServiceSpanSeconds)
	}
	// Six minutes later the recent window is empty; the mean falls back to the day's.
	r = o.Recent(t0.Add(7 * time.Minute))
	if r.FinishedCount != 0 || r.AchievedRatePerSecond != 0 {
		t.Errorf("after the span: %+v", r)
	}
	if r.MeanServiceMs == nil || *r.MeanServiceMs != 200 || r.MeanServiceSpanSeconds != 86400 {
		t.Errorf("fallback mean %v (over %d s), want 200 ms from 24 h", r.MeanServiceMs, r.MeanServiceSpanSeconds)
	}
	// A request without a duration (an invalid task) counts as achieved, not in the mean.
	clk.Set(t0.Add(8 * time.Minute))
	o.Observe(finished(entryA, 0, downloader.FailInvalidTask))
	r = o.Recent(clk.Now())
	if r.FinishedCount != 1 || r.MeanServiceSpanSeconds != 86400 {
		t.Errorf("zero duration: %+v", r)
	}
}

func TestProbeSamples(t *testing.T) {
	clk := clocktest.NewFake(t0)
	o := New(Config{Clock: clk, SampleCount: 3})
	if got := o.ProbeSamples(10); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for i := range 5 {
		clk.Set(t0.Add(time.Duration(i) * time.Second))
		ev := finished(entryC, time.Duration(i)*time.Millisecond, "")
		ev.At = clk.Now()
		o.Observe(ev)
		o.Observe(finished(entryB, time.Second, "")) // not a probe
	}
	got := o.ProbeSamples(10)
	if len(got) != 3 {
		t.Fatalf("%d samples, want the ring's 3", len(got))
	}
	for i, s := range got {
		want := t0.Add(time.Duration(4-i) * time.Second)
		if !s.ProbedAt.Equal(want) || *s.ElapsedMs != int64(4-i) {
			t.Errorf("sample %d: %v %d ms, want %v (newest first)", i, s.ProbedAt, *s.ElapsedMs, want)
		}
	}
	if got := o.ProbeSamples(2); len(got) != 2 || !got[0].ProbedAt.Equal(t0.Add(4*time.Second)) {
		t.Errorf("limit 2: %v", got)
	}
	o.Observe(refused(entryC, downloader.FailSelfRateLimited))
	s := o.ProbeSamples(1)[0]
	if !s.IsOverLimit || s.ElapsedMs != nil || s.HTTPStatus != nil || s.HasReachedOrigin ||
		s.FailReason == nil || *s.FailReason != downloader.FailSelfRateLimited {
		t.Errorf("refused probe sample: %+v", s)
	}
}

// TestLogLines checks one JSON line per probe and per over-limit event, with the API's
// field names and nulls where the API has them.
func TestLogLines(t *testing.T) {
	var buf bytes.Buffer
	o := New(Config{Clock: clocktest.NewFake(t0), Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	o.Observe(finished(entryC, 1500*time.Millisecond, ""))
	o.Observe(refused(entryC, downloader.FailSelfRateLimited))
	o.Observe(refused(entryB, downloader.FailLocalQueueFull))
	a := refused(entryA, "")
	a.TaskID = "t-1"
	o.Observe(a)
	o.Observe(finished(entryB, time.Second, "")) // debug: not written at info

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), buf.String())
	}
	want := []struct {
		msg    string
		fields map[string]any // nil value: JSON null
	}{
		{"probe", map[string]any{"entry": "c", "domain": "news.example.tw", "url": "https://news.example.tw/",
			"should_render": false, "http_status": 200.0, "raw_text_length": 12.0, "text_length": nil,
			"has_reached_origin": true, "fail_reason": nil, "elapsed_ms": 1500.0, "min_interval_ms": 1000.0,
			"interval_source": "request", "is_over_limit": false}},
		{"probe", map[string]any{"entry": "c", "http_status": nil, "has_reached_origin": false,
			"fail_reason": "self_rate_limited", "retry_after_seconds": 2.0, "is_over_limit": true, "interval_source": "default"}},
		{"over limit", map[string]any{"entry": "b", "fail_reason": "local_queue_full", "retry_after_seconds": 2.0,
			"has_reached_origin": false, "http_status": nil}},
		{"over limit", map[string]any{"entry": "a", "delay_ms": 1500.0, "task_id": "t-1", "is_over_limit": true}},
	}
	for i, w := range want {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatalf("line %d is not JSON: %v", i, err)
		}
		if m["msg"] != w.msg {
			t.Errorf("line %d: msg %v, want %s", i, m["msg"], w.msg)
		}
		for k, v := range w.fields {
			got, ok := m[k]
			if !ok || got != v {
				t.Errorf("line %d: %s = %v (present %v), want %v\n%s", i, k, got, ok, v, lines[i])
			}
		}
	}
	var first map[string]any
	json.Unmarshal([]byte(lines[0]), &first)
	hs, ok := first["health_signal"].(map[string]any)
	if !ok || hs["xhr_count"] != nil {
		t.Errorf("health_signal %v: want the API's object, xhr_count null on a plain fetch", first["health_signal"])
	}
}

type recordingSink struct {
	mu  sync.Mutex
	evs []*downloader.Event
}

func (r *recordingSink) Observe(ev *downloader.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

func TestSinksAndConcurrency(t *testing.T) {
	sink := &recordingSink{}
	clk := clocktest.NewFake(t0)
	o := New(Config{Clock: clk, Sinks: []downloader.Observer{sink}, SampleCount: 16})
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				switch (w + i) % 3 {
				case 0:
					o.Observe(finished(entryC, time.Millisecond, ""))
				case 1:
					o.Observe(refused(entryB, downloader.FailSelfRateLimited))
				default:
					o.Observe(finished(entryA, time.Millisecond, ""))
				}
				if i%50 == 0 {
					o.Counts(clk.Now())
					o.ProbeSamples(5)
					o.Recent(clk.Now())
				}
			}
		}()
	}
	wg.Wait()
	if len(sink.evs) != workers*each {
		t.Errorf("sink saw %d events, want %d", len(sink.evs), workers*each)
	}
	if c := o.Counts(clk.Now()); c.Request24hCount != workers*each {
		t.Errorf("%d requests, want %d", c.Request24hCount, workers*each)
	}
}

func TestCeilingsOf(t *testing.T) {
	ms := func(v float64) *float64 { return &v }
	tests := []struct {
		name       string
		d          DomainSummary
		r          Recent
		cap        int
		politeness *float64
		capacity   *float64
		binding    Binding // "": null
	}{
		{"nothing known", DomainSummary{}, Recent{}, 64, nil, nil, ""},
		{"politeness binds", DomainSummary{ActiveDomainCount: 10, PolitenessSumPerSecond: 10},
			Recent{MeanServiceMs: ms(500)}, 64, ms(10), ms(128), BindingPoliteness},
		{"capacity binds", DomainSummary{ActiveDomainCount: 100000, PolitenessSumPerSecond: 100000},
			Recent{MeanServiceMs: ms(2000)}, 64, ms(100000), ms(32), BindingCapacity},
		{"an unbounded domain leaves only the cap", DomainSummary{ActiveDomainCount: 2, UnboundedDomainCount: 1, PolitenessSumPerSecond: 1},
			Recent{MeanServiceMs: ms(1000)}, 8, nil, ms(8), BindingCapacity},
		{"no service time yet", DomainSummary{ActiveDomainCount: 1, PolitenessSumPerSecond: 0.5},
			Recent{}, 8, ms(0.5), nil, BindingPoliteness},
	}
	eq := func(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := CeilingsOf(tt.d, tt.r, tt.cap)
			if !eq(c.PolitenessCeilingPerSecond, tt.politeness) || !eq(c.CapacityCeilingPerSecond, tt.capacity) {
				t.Errorf("ceilings %v %v, want %v %v", c.PolitenessCeilingPerSecond, c.CapacityCeilingPerSecond, tt.politeness, tt.capacity)
			}
			var b Binding
			if c.BindingCeiling != nil {
				b = *c.BindingCeiling
			}
			if b != tt.binding {
				t.Errorf("binding %q, want %q", b, tt.binding)
			}
		})
	}
}

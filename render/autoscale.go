package render

import (
	"runtime"
	"slices"
	"sync"
	"time"

	"downloader"
	"downloader/internal/procstat"
)

// Scaling is how many of the pool's slots are used (--render-scaling).
type Scaling string

const (
	// ScalingAdaptive lets the pool's effective slot count follow the machine, between one
	// and Config.Concurrency (never above it): down fast when renders slow down against
	// their unloaded latency or time out, up while there is headroom and renders are
	// waiting for a slot: doubling until the first sign of load, one slot at a time after
	// it. In the spirit of Crawlee's AutoscaledPool (and of TCP's slow start).
	ScalingAdaptive Scaling = "adaptive"
	// ScalingFixed uses every slot, always (the operator's count is the count).
	ScalingFixed Scaling = "fixed"
)

// The controller's tunables (docs/benchmarks-render.md has the measurement behind them).
const (
	// scaleTick is how often the controller samples the machine and decides.
	scaleTick = time.Second
	// scaleMinSamples is how many renders started at the current count must have ended
	// before it is judged (and at least one per slot of the count: the first renders to
	// end after a step up are the fastest of it, and would judge the count too kindly):
	// a judgement on renders started under another count would judge that count.
	scaleMinSamples = 3
	// scaleUpEvery is the least time between a change and a one-slot step up. A doubling
	// waits only for its samples: it happens only while the p50 is at the unloaded one.
	scaleUpEvery = 2 * time.Second
	// overloadLatencyRatio: renders whose p50 is more than this many times the unloaded
	// p50 mean the machine is overloaded (the goal is to stay within 1.5×).
	overloadLatencyRatio = 1.5
	// headroomLatencyRatio: below it one more slot is tried; from it to
	// overloadLatencyRatio the count holds, unless the host's CPU is saturated
	// (busyCPURatio): then one slot less. The CPU alone decides nothing: a host shared
	// with other work is saturated without our renders being slow.
	headroomLatencyRatio = 1.4
	// doubleLatencyRatio: below it, and until the count has once come down, the count
	// doubles instead of growing by one (renders as fast as alone: the CPU is not the
	// limit yet). A count that came down knows where the load begins: one slot at a time
	// from there.
	doubleLatencyRatio = 1.2
	busyCPURatio       = 0.95
	// downToLatencyRatio is where a scale-down aims.
	downToLatencyRatio = 1.3
)

// renderSample is one render the controller saw end: when its slot was taken, when it
// ended, and whether it ended in render_timeout.
type renderSample struct {
	startedAt, endedAt time.Time
	isTimeout          bool
}

// scaleInput is what one decision sees.
type scaleInput struct {
	now time.Time
	// cpuBusyRatio is how busy the host's CPUs were since the last decision (0–1);
	// negative when unknown (then latency alone decides).
	cpuBusyRatio float64
	// samples are the renders ended since the last decision.
	samples []renderSample
	// isDemand: renders were waiting for a slot, or every slot was taken, at the sample.
	isDemand bool
}

// scaler is the controller's state: a pure decision on injected time and samples (no
// clock, no I/O), so that it can be tested on a fake timeline.
type scaler struct {
	max       int           // the operator's cap (Config.Concurrency)
	limit     int           // the effective slot count
	changedAt time.Time     // of the last change of limit
	baseline  time.Duration // the unloaded p50 render latency; 0 until known
	window    []renderSample
	// hasComeDown: the count went down once (latency, CPU, render_timeout); from then on
	// it grows one slot at a time.
	hasComeDown bool
	// doubleMax is the most a doubling goes to (twice the host's cores): renders are CPU
	// work, and a render as fast as alone at that count says little about twice it (the
	// first renders after a step are judged before the CPU queue builds up). From there,
	// one slot at a time.
	doubleMax int
}

// newScaler starts at one slot: the first renders give the unloaded latency, and the count
// climbs from there while there is headroom (starting at the cap on an overloaded machine
// would time renders out before the controller knows what unloaded is).
func newScaler(max, doubleMax int, now time.Time) *scaler {
	return &scaler{max: max, limit: 1, changedAt: now, doubleMax: doubleMax}
}

// decide takes one step and returns the effective slot count and why it changed ("" when
// it did not).
//
//   - Only renders whose slot was taken after the last change are judged, at least
//     scaleMinSamples of them (a render_timeout among them is enough on its own).
//   - A render_timeout halves the count. A p50 over overloadLatencyRatio × the baseline
//     scales down in proportion (the count that would bring the p50 to downToLatencyRatio ×
//     if latency grows with the count, as it does on saturated CPUs), by one slot at least
//     and half at most. From headroomLatencyRatio × to there, a saturated host CPU takes
//     one slot off; else the count holds.
//   - While renders wait for a slot and the p50 is under headroomLatencyRatio ×: up
//     (whatever the CPU: another process's load is no reason to render slower than the
//     machine allows). Twice the count (to the cap at most) while the p50 is under
//     doubleLatencyRatio × and the count never came down, up to doubleMax; else one slot
//     more, at most every scaleUpEvery.
//   - The baseline is the lowest window p50 seen, and the window p50 at one slot whatever
//     it is (alone on the pool, a render is as unloaded as this machine allows: pages that
//     got heavier raise it there).
func (s *scaler) decide(in scaleInput) (int, string) {
	for _, r := range in.samples {
		if !r.startedAt.Before(s.changedAt) {
			s.window = append(s.window, r)
		}
	}
	timedOut := slices.ContainsFunc(s.window, func(r renderSample) bool { return r.isTimeout })
	if timedOut && s.limit > 1 {
		return s.set(in.now, max(1, s.limit/2), "render_timeout")
	}
	if len(s.window) < max(scaleMinSamples, s.limit) {
		return s.limit, ""
	}
	p50 := windowP50(s.window)
	if s.baseline == 0 || p50 < s.baseline || s.limit == 1 {
		s.baseline = p50
	}
	ratio := float64(p50) / float64(s.baseline)
	isCPUSaturated := in.cpuBusyRatio >= busyCPURatio
	switch {
	case s.limit > 1 && ratio > overloadLatencyRatio:
		n := int(float64(s.limit) * downToLatencyRatio / ratio)
		n = min(s.limit-1, max(n, s.limit/2, 1))
		return s.set(in.now, n, "latency")
	case s.limit > 1 && ratio >= headroomLatencyRatio && isCPUSaturated:
		return s.set(in.now, s.limit-1, "cpu")
	case s.limit < s.max && in.isDemand && ratio < doubleLatencyRatio && !s.hasComeDown && s.limit < s.doubleMax:
		return s.set(in.now, min(s.max, s.doubleMax, 2*s.limit), "headroom")
	case s.limit < s.max && in.isDemand && ratio < headroomLatencyRatio && in.now.Sub(s.changedAt) >= scaleUpEvery:
		return s.set(in.now, s.limit+1, "headroom")
	}
	// Keep judging the latest renders only: the window slides over the last 4 × the
	// minimum.
	if keep := 4 * max(scaleMinSamples, s.limit); len(s.window) > keep {
		s.window = slices.Delete(s.window, 0, len(s.window)-keep)
	}
	return s.limit, ""
}

func (s *scaler) set(now time.Time, n int, why string) (int, string) {
	if n < s.limit {
		s.hasComeDown = true
	}
	s.limit, s.changedAt, s.window = n, now, s.window[:0]
	return n, why
}

// windowP50 is the median latency (slot taken to end) of w, which is not empty.
func windowP50(w []renderSample) time.Duration {
	d := make([]time.Duration, len(w))
	for i, r := range w {
		d[i] = r.endedAt.Sub(r.startedAt)
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// autoscaler is the actor around scaler: renders report to it as they end, and a
// goroutine of the pool samples the host's CPU every scaleTick, decides and applies the
// count to the pool's gate (the slots AcquireSlot and Render take).
type autoscaler struct {
	p *Pool

	mu      sync.Mutex
	s       *scaler
	pending []renderSample // ended since the last decision

	cpuBusy, cpuTotal uint64 // the last /proc/stat reading
	hostCPU           func() (busy, total uint64, ok bool)
}

func newAutoscaler(p *Pool) *autoscaler {
	a := &autoscaler{p: p, s: newScaler(p.cfg.Concurrency, 2*runtime.NumCPU(), p.clk.Now()), hostCPU: procstat.HostCPU}
	a.cpuBusy, a.cpuTotal, _ = a.hostCPU()
	return a
}

// limit is the effective slot count to start the gate with.
func (a *autoscaler) limit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.s.limit
}

// observe records a render that took its slot at startedAt and ended now with out. Only
// renders that rendered a page (the main document answered) or timed out say something
// about the machine; the others (refused, unreachable, invalid) end at once.
func (a *autoscaler) observe(startedAt time.Time, out *downloader.Outcome) {
	isTimeout := out.FailReason == downloader.FailRenderTimeout
	if out.HTTPStatus == 0 && !isTimeout {
		return
	}
	r := renderSample{startedAt: startedAt, endedAt: a.p.clk.Now(), isTimeout: isTimeout}
	a.mu.Lock()
	a.pending = append(a.pending, r)
	a.mu.Unlock()
}

// run decides every scaleTick until the pool closes.
func (a *autoscaler) run() {
	for {
		t := a.p.clk.NewTimer(scaleTick)
		select {
		case <-a.p.ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		a.step()
	}
}

// step takes one sample and applies the decision.
func (a *autoscaler) step() {
	in := scaleInput{now: a.p.clk.Now(), cpuBusyRatio: -1}
	if busy, total, ok := a.hostCPU(); ok {
		if total > a.cpuTotal && busy >= a.cpuBusy {
			in.cpuBusyRatio = float64(busy-a.cpuBusy) / float64(total-a.cpuTotal)
		}
		a.cpuBusy, a.cpuTotal = busy, total
	}
	g := a.p.gate
	in.isDemand = g.Waiting() > 0 || g.InFlight() >= g.Capacity()
	a.mu.Lock()
	in.samples, a.pending = a.pending, nil
	before := a.s.limit
	n, why := a.s.decide(in)
	a.mu.Unlock()
	if n == before {
		return
	}
	g.SetCapacity(n)
	a.p.log.Info("render: effective slot count", "effective_slot_count", n, "reason", why, "cpu_busy_ratio", in.cpuBusyRatio)
	if n > before {
		a.p.refill() // IsolationWipe: the long-lived tab of the new slot
	}
}

package render

import (
	"cmp"
	"log/slog"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/limiter"
)

// TestScalerDecide walks the controller along a fake timeline: each step is one decision
// scaleTick after the previous, with the renders that ended in it (each took lat, its
// slot taken after the previous decision), the host's CPU and whether renders waited.
func TestScalerDecide(t *testing.T) {
	type step struct {
		lat       time.Duration // latency of each render of the step
		n         int           // renders ended in the step
		timeouts  int           // of which render_timeout
		cpu       float64
		isDemand  bool
		wantLimit int
		wantWhy   string
	}
	ms := time.Millisecond
	tests := []struct {
		name      string
		max       int
		steps     []step
		doubleMax int // 0: max
	}{
		{"doubles while renders are as fast as alone, to the cap", 8, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 520 * ms, n: 3, cpu: 0.6, isDemand: true, wantLimit: 4, wantWhy: "headroom"},
			{lat: 540 * ms, n: 4, cpu: 0.7, isDemand: true, wantLimit: 8, wantWhy: "headroom"},
			{lat: 560 * ms, n: 8, cpu: 0.8, isDemand: true, wantLimit: 8},
		}, 0},
		{"doubling stops at twice the cores, then one slot at a time", 16, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 3, wantWhy: "headroom"}, // not 4
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 3},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 4, wantWhy: "headroom"},
		}, 3},
		{"a cap that is no power of two", 3, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 3, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 3},
		}, 0},
		{"one render per slot before the count is judged", 8, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 4, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 4}, // 3 of 4 slots
			{lat: 500 * ms, n: 1, cpu: 0.5, isDemand: true, wantLimit: 8, wantWhy: "headroom"},
			// the three fastest renders at 8 alone would double-check nothing
			{lat: 500 * ms, n: 3, cpu: 0.9, isDemand: true, wantLimit: 8},
			{lat: 2000 * ms, n: 5, cpu: 0.9, isDemand: true, wantLimit: 4, wantWhy: "latency"}, // p50 4×: 8 × 1.3 / 4 = 2.6, half at most
		}, 0},
		{"between the doubling bound and the headroom bound: one slot, every scaleUpEvery", 8, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 4, wantWhy: "headroom"},
			{lat: 650 * ms, n: 4, cpu: 0.5, isDemand: true, wantLimit: 4}, // 1.3×, 1 s since the change
			{lat: 650 * ms, n: 4, cpu: 0.5, isDemand: true, wantLimit: 5, wantWhy: "headroom"},
			{lat: 650 * ms, n: 5, cpu: 0.5, isDemand: true, wantLimit: 5},
			{lat: 650 * ms, n: 5, cpu: 0.5, isDemand: true, wantLimit: 6, wantWhy: "headroom"},
		}, 0},
		{"after coming down once, one slot at a time", 8, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 4, wantWhy: "headroom"},
			{lat: 1000 * ms, n: 4, cpu: 0.9, isDemand: true, wantLimit: 2, wantWhy: "latency"}, // 4 × 1.3 / 2 = 2.6
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2},                      // as fast as alone, but 1 s since the change
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 3, wantWhy: "headroom"}, // not 4
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 3},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 4, wantWhy: "headroom"},
		}, 0},
		{"never above the operator's cap", 1, []step{
			{lat: 500 * ms, n: 3, cpu: 0.1, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.1, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.1, isDemand: true, wantLimit: 1},
		}, 0},
		{"no demand, no step up", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.1, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.1, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.1, wantLimit: 1},
		}, 0},
		{"too few renders at one slot: no judgement", 4, []step{
			{lat: 500 * ms, n: 2, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 1, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
		}, 0},
		{"a saturated CPU alone does not hold the count", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.99, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.99, isDemand: true, wantLimit: 4, wantWhy: "headroom"},
		}, 0},
		{"an unknown CPU: latency alone decides", 4, []step{
			{lat: 500 * ms, n: 3, cpu: -1, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 900 * ms, n: 3, cpu: -1, isDemand: true, wantLimit: 1, wantWhy: "latency"},
		}, 0},
		{"too few renders at the new count: no judgement", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 2000 * ms, n: 2, cpu: 0.5, isDemand: true, wantLimit: 2},
			{lat: 2000 * ms, n: 1, cpu: 0.5, isDemand: true, wantLimit: 1, wantWhy: "latency"},
		}, 0},
		{"near the bound with a saturated CPU: one slot less", 8, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 4, wantWhy: "headroom"},
			{lat: 725 * ms, n: 4, cpu: 0.99, isDemand: true, wantLimit: 3, wantWhy: "cpu"}, // 1.45×
		}, 0},
		{"near the bound on an idle CPU: hold", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 725 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2},
			{lat: 725 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2},
			{lat: 725 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2},
		}, 0},
		{"a render_timeout halves at once", 8, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 4, wantWhy: "headroom"},
			{lat: 500 * ms, n: 1, timeouts: 1, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "render_timeout"},
		}, 0},
		{"heavier pages at one slot become the baseline", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 1500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1, wantWhy: "latency"},
			{lat: 1500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1}, // the baseline now, 1 s since the change
			{lat: 1500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.NewFake(time.Unix(1_700_000_000, 0))
			s := newScaler(tt.max, cmp.Or(tt.doubleMax, tt.max), clk.Now())
			for i, st := range tt.steps {
				from := clk.Now()
				clk.Advance(scaleTick)
				in := scaleInput{now: clk.Now(), cpuBusyRatio: st.cpu, isDemand: st.isDemand}
				for j := range st.n {
					end := clk.Now().Add(-time.Duration(j) * time.Millisecond)
					start := end.Add(-st.lat)
					if start.Before(from) { // its slot was taken after the previous decision
						start = from
						end = start.Add(st.lat)
					}
					in.samples = append(in.samples, renderSample{startedAt: start, endedAt: end, isTimeout: j < st.timeouts})
				}
				limit, why := s.decide(in)
				if limit != st.wantLimit || why != st.wantWhy {
					t.Fatalf("step %d: decide = %d %q, want %d %q (baseline %v)", i, limit, why, st.wantLimit, st.wantWhy, s.baseline)
				}
			}
		})
	}
}

// TestAutoscalerStep: the actor feeds the renders that ended and the host's CPU to the
// decision and applies its count to the pool's gate, the slots AcquireSlot takes.
func TestAutoscalerStep(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(1_700_000_000, 0))
	p := &Pool{cfg: poolConfig{Config: Config{Concurrency: 4}}, clk: clk, log: slog.New(slog.DiscardHandler), gate: limiter.NewGate(4, 8)}
	cpu := []uint64{0, 100}
	a := newAutoscaler(p)
	a.hostCPU = func() (uint64, uint64, bool) { cpu[0] += 50; cpu[1] += 100; return cpu[0], cpu[1], true }
	p.gate.SetCapacity(a.limit())
	if got := p.gate.Capacity(); got != 1 {
		t.Fatalf("gate capacity %d at the start, want 1", got)
	}
	if !p.gate.TryAcquire() { // the one slot is busy: renders are waiting for more
		t.Fatal("no slot")
	}
	for range 3 {
		start := clk.Now()
		clk.Advance(time.Second)
		a.observe(start, &downloader.Outcome{HTTPStatus: 200})
		a.observe(start, &downloader.Outcome{FailReason: downloader.FailConnectRefused}) // says nothing
		a.step()
	}
	if got := p.gate.Capacity(); got != 2 {
		t.Errorf("gate capacity %d after 3 renders at the unloaded p50 with demand, want 2 (doubled)", got)
	}
	start := clk.Now()
	clk.Advance(30 * time.Second)
	a.observe(start, &downloader.Outcome{FailReason: downloader.FailRenderTimeout})
	a.step()
	if got := p.gate.Capacity(); got != 1 {
		t.Errorf("gate capacity %d after a render_timeout at 2, want 1", got)
	}
}

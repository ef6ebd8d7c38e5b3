package render

import (
	"testing"
	"time"

	"downloader/clock"
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
		name  string
		max   int
		steps []step
	}{
		{"starts at one and climbs slowly while there is headroom", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1}, // < scaleUpEvery since the start
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 520 * ms, n: 3, cpu: 0.6, isDemand: true, wantLimit: 2},
			{lat: 520 * ms, n: 3, cpu: 0.6, isDemand: true, wantLimit: 2},
			{lat: 520 * ms, n: 3, cpu: 0.6, isDemand: true, wantLimit: 3, wantWhy: "headroom"},
		}},
		{"never above the operator's cap", 1, []step{
			{lat: 500 * ms, n: 3, cpu: 0.1, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.1, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.1, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.1, isDemand: true, wantLimit: 1},
		}},
		{"no demand, no step up", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.1, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.1, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.1, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.1, wantLimit: 1},
		}},
		{"a saturated CPU alone does not hold the count", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.99, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.99, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.99, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
		}},
		{"an unknown CPU: latency alone decides", 4, []step{
			{lat: 500 * ms, n: 3, cpu: -1, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: -1, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: -1, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
		}},
		{"too few renders at the new count: no judgement", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 2000 * ms, n: 2, cpu: 0.5, isDemand: true, wantLimit: 2},
			{lat: 2000 * ms, n: 1, cpu: 0.5, isDemand: true, wantLimit: 1, wantWhy: "latency"},
		}},
		{"overloaded: down in proportion, half at most", 8, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 3, wantWhy: "headroom"},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 3},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 3},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 4, wantWhy: "headroom"},
			{lat: 1000 * ms, n: 3, cpu: 0.8, isDemand: true, wantLimit: 2, wantWhy: "latency"}, // 4 × 1.3 / 2 = 2.6
		}},
		{"near the bound with a saturated CPU: one slot less", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 725 * ms, n: 3, cpu: 0.99, isDemand: true, wantLimit: 1, wantWhy: "cpu"}, // 1.45×
		}},
		{"near the bound on an idle CPU: hold", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 725 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2},
			{lat: 725 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2},
			{lat: 725 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2},
		}},
		{"a render_timeout halves at once", 8, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
			{lat: 500 * ms, n: 1, timeouts: 1, cpu: 0.5, isDemand: true, wantLimit: 1, wantWhy: "render_timeout"},
		}},
		{"heavier pages at one slot become the baseline", 4, []step{
			{lat: 500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 1500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 1},
			{lat: 1500 * ms, n: 3, cpu: 0.5, isDemand: true, wantLimit: 2, wantWhy: "headroom"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			s := newScaler(tt.max, clk.Now())
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

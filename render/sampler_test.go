package render

import "testing"

// TestProcSamplerLeavesItselfOut checks that a benchmark's CPU of this process ("go")
// does not count the sampler's own reading of /proc: the sampler runs while the test
// waits, so nearly all this process's CPU meanwhile is the sampler's. Counted in, a
// variant measured for longer was charged for it (docs/decisions.md).
func TestProcSamplerLeavesItselfOut(t *testing.T) {
	s := startProcSampler()
	for range 20 {
		<-s.samples
	}
	out := s.stop()
	if s.sampled <= 0 {
		t.Fatalf("the sampler's own CPU was not measured: %v", s.sampled)
	}
	if out["go"] >= s.sampled {
		t.Errorf("go CPU %v while the sampler alone used %v: the sampling is counted in", out["go"], s.sampled)
	}
}

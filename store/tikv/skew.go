package tikv

import (
	"context"
	"time"

	"github.com/tikv/client-go/v2/oracle"
)

// The clock check: how far the local clock may be from PD's, and the fence when that
// cannot be bounded within half the skew allowance (membership.go says why half).

// clockSample is one check of the local clock against PD's: the true offset (local minus
// PD) lies in [lo, hi].
type clockSample struct {
	at     time.Time
	lo, hi time.Duration
}

// Clock checks keep the last clockSampleCount samples of the last clockWindow: their
// intersection bounds the offset far tighter than one sample (each sample's TSO lag is
// different), as long as the clock does not step.
const (
	clockSampleCount = 16
	clockWindow      = time.Minute
)

// tsoNow is PD's clock as its TSO tells it (the physical part trails by up to TSOLag).
func (r *Runtime) tsoNow(ctx context.Context) (time.Time, error) {
	ts, err := r.s.timestamp(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return oracle.GetTimeFromTS(ts), nil
}

// checkClock measures the local clock against PD's and fences this instance while its
// offset cannot be bounded within half the allowance: two instances within half of it
// each differ by less than all of it, which is what every comparison of another
// instance's instant assumes. A failed measurement adds no sample; when the window runs
// empty the offset is unbounded.
func (r *Runtime) checkClock(ctx context.Context) {
	t0 := r.clk.Now()
	ref, err := r.refNow(ctx)
	t1 := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.samples[:0]
	for _, s := range r.samples {
		if t1.Sub(s.at) < clockWindow {
			kept = append(kept, s)
		}
	}
	r.samples = kept
	if err == nil {
		half := t1.Sub(t0) / 2
		off := t0.Add(half).Sub(ref)
		ms := off.Milliseconds()
		r.offsetMs = &ms
		s := clockSample{at: t1, lo: off - half - r.cfg.TSOLag, hi: off + half}
		lo, hi := r.boundLocked()
		if len(r.samples) > 0 && (s.hi < lo || s.lo > hi) {
			r.samples = r.samples[:0] // the clock stepped: start over
		}
		r.samples = append(r.samples, s)
		if len(r.samples) > clockSampleCount {
			r.samples = r.samples[len(r.samples)-clockSampleCount:]
		}
	}
	lo, hi := r.boundLocked()
	allowed := r.cfg.MaxClockSkew / 2
	bounded := len(r.samples) > 0 && lo >= -allowed && hi <= allowed
	if bounded {
		if r.skewErr != nil {
			r.log.Info("the local clock is within the allowance again: admitting", "clock_offset_ms", r.offsetMs)
		}
		r.skewErr = nil
		return
	}
	r.skewErr = errClockSkewed
	if r.skewWarned.IsZero() || t1.Sub(r.skewWarned) > time.Minute {
		r.skewWarned = t1
		r.log.Error("the local clock cannot be bounded within half of max_clock_skew_ms from PD's TSO: this instance admits nothing until it can (fix NTP)",
			"clock_offset_min_ms", lo.Milliseconds(), "clock_offset_max_ms", hi.Milliseconds(),
			"max_clock_skew_ms", r.cfg.MaxClockSkew.Milliseconds(), "sample_count", len(r.samples))
	}
}

// boundLocked intersects the samples (lo > hi when there are none). Requires r.mu held.
func (r *Runtime) boundLocked() (lo, hi time.Duration) {
	lo, hi = time.Duration(-1<<63), time.Duration(1<<63-1)
	if len(r.samples) == 0 {
		return 1, 0
	}
	for _, s := range r.samples {
		lo, hi = max(lo, s.lo), min(hi, s.hi)
	}
	return lo, hi
}

// resetClockSamples forgets the clock checks so far (tests: a clock fixed by hand).
func (r *Runtime) resetClockSamples() {
	r.mu.Lock()
	r.samples = nil
	r.mu.Unlock()
}

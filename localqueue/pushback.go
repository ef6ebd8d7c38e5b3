package localqueue

import (
	"net/http"
	"time"

	"downloader"
)

// The domain's pushback curve. The local queue stands in for the scheduler (SPEC §1), and
// a scheduler backs off a site that pushes back even when it does not say for how long.
// A 429 or 503 that reached the origin without a Retry-After holds the whole domain (all
// its tasks, not only the one that failed) for a wait of its own:
//
//	the n-th such answer within a quiet time of the last one: PushbackBaseDelay doubled
//	n-1 times, at most PushbackMaxDelay; its upper half is jitter (never less than half
//	the nominal wait, so that a crawl's domains spread without any coming back early);
//	after PushbackForgiveAfter without one, the curve starts again from the base.
//
// A Retry-After is the origin's own word and decides alone (retry.go); this curve is for
// the silent ones. A hold never shortens another (holdLocked keeps the later one) and never
// lowers an interval. Memory only, one small entry per domain that pushed back within the
// quiet time: a restart forgets the curve, as it forgets the holds.
const (
	PushbackBaseDelay    = 5 * time.Second
	PushbackMaxDelay     = 5 * time.Minute
	PushbackForgiveAfter = 10 * time.Minute
)

// pushbacks is the curve's state per domain. Its zero value is empty and ready. Guarded
// by the queue's mutex.
type pushbacks struct {
	m       map[string]pushback
	sweptAt time.Time
}

type pushback struct {
	count  int       // answers in the current run (no quiet time between them)
	lastAt time.Time // the latest one
}

// isPushback reports whether r is the origin pushing back: a 429 or 503 it answered.
func isPushback(r *downloader.Report) bool {
	if !r.HasReachedOrigin || r.HTTPStatus == nil {
		return false
	}
	st := *r.HTTPStatus
	return st == http.StatusTooManyRequests || st == http.StatusServiceUnavailable
}

// next records a pushback of domain at now and returns how long the domain is held.
// jitter returns a number in [0, 1).
func (p *pushbacks) next(domain string, now time.Time, jitter func() float64) time.Duration {
	if p.m == nil {
		p.m = map[string]pushback{}
	}
	p.sweep(now)
	pb := p.m[domain]
	if now.Sub(pb.lastAt) >= PushbackForgiveAfter {
		pb.count = 0
	}
	pb.count++
	pb.lastAt = now
	p.m[domain] = pb
	return pushbackWait(pb.count, jitter())
}

// pushbackWait is the hold after the count-th pushback of a run, with jitter j in [0, 1).
func pushbackWait(count int, j float64) time.Duration {
	d := PushbackBaseDelay
	for i := 1; i < count && d < PushbackMaxDelay; i++ {
		d *= 2
	}
	d = min(d, PushbackMaxDelay)
	half := d / 2
	j = min(max(j, 0), 1)
	return half + time.Duration(j*float64(d-half))
}

// sweep forgets the domains whose run is over, at most once per quiet time, so that the
// map holds only the domains that pushed back within the last two quiet times.
func (p *pushbacks) sweep(now time.Time) {
	if now.Sub(p.sweptAt) < PushbackForgiveAfter {
		return
	}
	p.sweptAt = now
	for d, pb := range p.m {
		if now.Sub(pb.lastAt) >= PushbackForgiveAfter {
			delete(p.m, d)
		}
	}
}

// decideLocked is decide with the domain's pushback curve: a 429 or 503 without a
// Retry-After holds the domain by the curve. Requires q.mu held.
func (q *Queue) decideLocked(rec *queueRecord, r *downloader.Report, now time.Time) retryDecision {
	d := q.cfg.decide(rec, r, now)
	if isPushback(r) && (r.HealthSignal == nil || r.HealthSignal.RetryAfterSeconds == nil) {
		d.hold = later(d.hold, now.Add(q.pushbacks.next(rec.Domain, now, q.cfg.Jitter)))
	}
	return d
}

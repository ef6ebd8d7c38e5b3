package limiter

import (
	"time"

	"downloader/retryafter"
)

// The origin's own wait (SPEC §2). A 429 or 503 with a Retry-After, from a plain fetch or
// a render's main document, holds its domain on every entry until then: Allow refuses
// with the remaining wait (B: 429, C: self_rate_limited), Reserve gives a slot after it
// (A waits, or hands the task back when the wait outlives the lease), and a request
// admitted before the origin asked does not go on the wire before it (Wire waits).
//
// A hold only ever lengthens the wait: it never shortens one in force, never lowers an
// interval, and is at most retryafter.MaxWait from the moment it is set (saturating, so
// that no number an origin sends wraps into an early request). It costs the admission
// path one more field in the max it already takes. It lives in the domain's entry, is
// saved and restored with it (persist.go) and keeps the entry from the sweep while it
// lasts.

// noHoldNs is the hold of an entry the origin never asked to wait: before any instant
// the limiter meets (as noLossNs is), so that the admission rule's max needs no branch.
const noHoldNs = noLossNs

// HoldDomain holds domain until wait after now: no request to it is admitted, or goes on
// the wire, before then. wait is clamped to [0, retryafter.MaxWait]; a hold already in
// force that ends later is kept. It returns the end of the domain's hold.
func (l *Limiter) HoldDomain(now time.Time, domain string, wait time.Duration) time.Time {
	wait = min(max(wait, 0), retryafter.MaxWait)
	t := l.ns(now)
	s := l.shardOf(domain)
	s.mu.Lock()
	en := s.lookup(l, domain)
	en.holdNs = max(en.holdNs, t+int64(wait))
	until := en.holdNs
	s.mu.Unlock()
	return l.at(until)
}

// HeldFor is how long the admission's domain is still held by an origin's wait at now,
// 0 when it is not: a reservation that waited for its slot asks it before it runs, since
// the origin may have asked for a wait meanwhile (entry A then reserves again).
func (a *Admission) HeldFor(now time.Time) time.Duration {
	if a.l == nil {
		return 0
	}
	t := a.l.ns(now)
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	if t < a.en.holdNs {
		return time.Duration(a.en.holdNs - t)
	}
	return 0
}

// holdUntil is the entry's hold end while it lasts at t, and false when there is none.
// Requires the shard's lock.
func (l *Limiter) holdUntil(en *entry, t int64) (time.Time, bool) {
	if t < en.holdNs {
		return l.at(en.holdNs), true
	}
	return time.Time{}, false
}

package limiter

import (
	"math"
	"time"

	"downloader"
	"downloader/retryafter"
)

// The table across restarts of one machine (SPEC §2, loss and rebuild). The limiter does
// no I/O: the service saves a downloader.RuntimeSnapshot at a clean stop and restores it
// at the next start (Restore), or, when the previous process died without saving, counts
// the table as lost at that process's last sign of life (RestoreAfterCrash). A data dir that never served
// has nothing to lose (SetLoss with the zero time). Every one of these must be called
// before the first request; New alone counts the table as lost at its creation.

// noLossNs is the loss moment of a table that lost nothing: so far back that no interval
// the service accepts reaches from it to any instant it meets, and far enough from
// math.MinInt64 that adding an interval to it cannot overflow.
const noLossNs = math.MinInt64 / 4

// canRefuse reports whether en can still refuse a request at t. Requires the shard's lock.
func canRefuse(en *entry, t int64) bool {
	return en.inFlight > 0 || t < en.lastNs+int64(downloader.MaxMinInterval) || t < en.holdNs
}

// Save returns the entries that can still refuse a request at now, with the instants on
// the wall clock (the next process has another monotonic clock). It is meant for a clean
// stop, once nothing is sent any more; the 24 h statistics are not kept.
func (l *Limiter) Save(now time.Time) downloader.RuntimeSnapshot {
	t := l.ns(now)
	snap := downloader.RuntimeSnapshot{SavedAt: wall(now)}
	if loss := l.lossNs.Load(); t < loss+int64(downloader.MaxMinInterval) {
		snap.LossAt = wall(l.at(loss))
	}
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for d, en := range s.entries {
			if !canRefuse(en, t) {
				continue
			}
			e := downloader.SavedDomain{Domain: d, LastRequestAt: wall(l.at(en.lastNs)), InFlightCount: int(en.inFlight)}
			if en.outSeq != 0 {
				e.WireAt = wall(l.at(en.outNs))
			}
			if en.seq != 0 {
				e.MinIntervalMs, e.IntervalSource = int64(en.intervalMs), en.source.source()
			}
			if until, ok := l.holdUntil(en, t); ok {
				e.HoldUntil = wall(until)
			}
			snap.Entries = append(snap.Entries, e)
		}
		s.mu.Unlock()
	}
	return snap
}

// wall strips the monotonic reading: a saved instant is compared on the wall clock.
func wall(t time.Time) time.Time { return t.Round(0).UTC() }

// Restore puts back what a clean stop saved, so that every domain is admitted exactly
// when it would have been had the process not stopped. If the wall clock is behind the
// save (it was set back), every instant is moved back by the difference: the time that
// really passed is unknown, and taking none is the safe side. Call it before the first
// request.
func (l *Limiter) Restore(now time.Time, snap downloader.RuntimeSnapshot) {
	shift := int64(0)
	if now.Before(snap.SavedAt) {
		shift = int64(now.Sub(snap.SavedAt))
	}
	ns := func(w time.Time) int64 { return l.ns(w) + shift }
	loss := int64(noLossNs)
	if !snap.LossAt.IsZero() {
		loss = ns(snap.LossAt)
	}
	l.lossNs.Store(loss)
	savedAt := ns(snap.SavedAt)
	for _, e := range snap.Entries {
		gate := ns(e.LastRequestAt)
		if e.InFlightCount > 0 {
			gate = max(gate, savedAt)
		}
		en := &entry{lastNs: gate, outNs: gate, holdNs: noHoldNs, requests: newWindow(),
			intervalMs: int32(min(e.MinIntervalMs, math.MaxInt32)), source: sourceCodeOf(e.IntervalSource)}
		if e.IntervalSource != "" {
			en.seq = 1
		}
		if !e.HoldUntil.IsZero() {
			// At most the longest wait from the save, however the saved moment was set.
			en.holdNs = min(ns(e.HoldUntil), savedAt+int64(retryafter.MaxWait))
		}
		if !e.WireAt.IsZero() {
			// The saved request is the entry's first admission here, so that Wire spaces
			// the next one from it (outSeq must differ from every later admission's seq).
			en.outNs, en.seq, en.outSeq = ns(e.WireAt), 1, 1
		}
		s := l.shardOf(e.Domain)
		s.mu.Lock()
		if old := s.entries[e.Domain]; old == nil || old.inFlight == 0 {
			s.entries[e.Domain] = en
		}
		s.mu.Unlock()
	}
}

// RestoreAfterCrash counts the table as lost at the previous process's last sign of life:
// its last heartbeat plus two heartbeat periods (it may have sent requests until the next
// heartbeat was due, and that one may have been late), but never after now, which is
// after anything it sent. A domain then waits one interval from that moment at most,
// rather than from this start. Call it before the first request.
func (l *Limiter) RestoreAfterCrash(now, lastHeartbeatAt time.Time, heartbeatPeriod time.Duration) {
	loss := lastHeartbeatAt.Add(2 * heartbeatPeriod)
	if loss.After(now) {
		loss = now
	}
	l.lossNs.Store(l.ns(loss))
}

// SetLoss sets the moment the table counts as lost: a domain with no entry is treated as
// requested at it. The zero time means nothing was lost (a data dir that never served).
// Call it before the first request.
func (l *Limiter) SetLoss(at time.Time) {
	if at.IsZero() {
		l.lossNs.Store(noLossNs)
		return
	}
	l.lossNs.Store(l.ns(at))
}

// LossAt returns the moment the table counts as lost, and false when nothing was lost.
func (l *Limiter) LossAt() (time.Time, bool) {
	loss := l.lossNs.Load()
	if loss == noLossNs {
		return time.Time{}, false
	}
	return l.at(loss), true
}

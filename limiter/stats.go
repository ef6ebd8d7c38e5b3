package limiter

import (
	"context"
	"time"

	"downloader"
)

// overLimitStateSpan is how long after an over-limit event a domain's state shows it.
const overLimitStateSpan = 5 * time.Minute

// sweepEvery is how often Run looks for entries that carry no information any more.
const sweepEvery = time.Minute

// shardStats are the shard's share of the service-wide 24 h counts. Guarded by the
// shard's mutex.
type shardStats struct {
	requests window
	triggers [len(downloader.Entries)]window
}

func (l *Limiter) snapshot(domain string, en *entry, t int64) downloader.DomainState {
	h := hourOf(t)
	st := downloader.DomainState{
		Domain:          domain,
		MinIntervalMs:   int64(en.intervalMs),
		IntervalSource:  en.source.source(),
		InFlightCount:   int(en.inFlight),
		Request24hCount: en.requests.sum(h),
		State:           downloader.RateStateNormal,
	}
	// lastNs is the moment the next interval counts from: a request's moment, or the loss
	// moment for a domain whose requests the lost table knew. Only the first is shown as
	// last_request_at; the loss has a field of its own.
	loss := l.lossNs.Load()
	fromLoss := en.lastNs == loss && !(en.outSeq != 0 && en.outNs >= loss)
	switch {
	case !fromLoss:
		st.LastRequestAt = l.at(en.lastNs).UTC()
	case en.outSeq != 0: // a request known from before the loss
		st.LastRequestAt = l.at(en.outNs).UTC()
	}
	if fromLoss && t < loss+int64(downloader.MaxMinInterval) {
		st.RebuildLossAt = l.at(loss).UTC()
	}
	if until, ok := l.holdUntil(en, t); ok {
		st.HoldUntilAt = until.UTC()
	}
	if en.overEntry != 0 {
		at := l.at(en.overNs).UTC()
		st.LastOverLimitEntry = en.overEntry.entry()
		st.LastOverLimitAt = &at
		if t-en.overNs < int64(overLimitStateSpan) {
			st.State = downloader.RateState("over_limit_" + string(st.LastOverLimitEntry))
		}
	}
	return st
}

// Domain returns the state of domain, or false if the table holds nothing for it.
func (l *Limiter) Domain(now time.Time, domain string) (downloader.DomainState, bool) {
	s := l.shardOf(domain)
	s.mu.Lock()
	defer s.mu.Unlock()
	en := s.entries[domain]
	if en == nil {
		return downloader.DomainState{}, false
	}
	return l.snapshot(domain, en, l.ns(now)), true
}

// CountsFrom returns the instant domain's next interval counts from: its latest admitted
// slot or wire moment, or the loss moment the rebuild counts as a request (which
// downloader.DomainState shows apart, as rebuild_loss_at). False if the table holds nothing for it.
func (l *Limiter) CountsFrom(domain string) (time.Time, bool) {
	s := l.shardOf(domain)
	s.mu.Lock()
	defer s.mu.Unlock()
	en := s.entries[domain]
	if en == nil {
		return time.Time{}, false
	}
	return l.at(en.lastNs).UTC(), true
}

// Range calls f with a snapshot of every domain, one shard at a time, until f returns
// false. f must not call the limiter.
func (l *Limiter) Range(now time.Time, f func(downloader.DomainState) bool) {
	t := l.ns(now)
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for d, en := range s.entries {
			if !f(l.snapshot(d, en, t)) {
				s.mu.Unlock()
				return
			}
		}
		s.mu.Unlock()
	}
}

// Stats sums the shards' counts at now.
func (l *Limiter) Stats(now time.Time) downloader.RuntimeStats {
	h := hourOf(l.ns(now))
	st := downloader.RuntimeStats{Trigger24hCount: make(map[downloader.Entry]uint64, len(downloader.Entries))}
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		st.DomainCount += len(s.entries)
		st.Request24hCount += s.stats.requests.sum(h)
		for k, e := range downloader.Entries {
			st.Trigger24hCount[e] += s.stats.triggers[k].sum(h)
		}
		st.InFlightCount += int(s.inFlight)
		s.mu.Unlock()
	}
	return st
}

// Sweep drops every entry that can no longer refuse a request and holds no statistic of
// the last 24 hours: nothing in flight, its last request at least downloader.MaxMinInterval
// ago (so any accepted interval has passed), no origin's wait in force, and no request or
// over-limit event in 24 h.
// It returns how many entries it dropped.
func (l *Limiter) Sweep(now time.Time) int {
	t := l.ns(now)
	h := hourOf(t)
	dropped := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for d, en := range s.entries {
			if en.inFlight == 0 &&
				t-en.lastNs >= int64(downloader.MaxMinInterval) && t >= en.holdNs &&
				en.requests.isEmpty(h) &&
				(en.overEntry == 0 || t-en.overNs >= int64(windowHours*time.Hour)) {
				delete(s.entries, d)
				dropped++
			}
		}
		s.mu.Unlock()
	}
	return dropped
}

// Run sweeps the table every minute until ctx ends. It always returns ctx's error.
func (l *Limiter) Run(ctx context.Context) error {
	for {
		if err := l.sleep(ctx, sweepEvery); err != nil {
			return err
		}
		l.Sweep(l.clk.Now())
	}
}

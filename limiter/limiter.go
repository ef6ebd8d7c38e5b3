// Package limiter is the downloader's insurance layer, downloader:domain_runtime: a
// start-to-start interval per domain that covers every entry (A, B and C), and a global
// cap on requests in flight (see gate.go). It does no I/O; time is always an argument or
// comes from an injected clock.
//
// The model (SPEC §2). A request for domain d with interval I is admitted at time t only if
// t >= last_request_at + I. Admitting sets last_request_at = t. When the request really
// goes on the wire (after DNS, connect and TLS) the caller calls Admission.Wire, which
// moves last_request_at forward to that moment and, in the rare case that another request
// to d went out, or was admitted to go out at once, since this one was admitted, makes the
// caller wait until it is I after that one (holding its turn meanwhile: nothing admitted
// later may start before it). A reservation never goes out before its slot, and it does not
// wait for the reservations made after it. So the origin never sees two requests closer
// than I, while decisions are still made at the time of the decision.
//
// A spent slot (SPEC §2): a request is on the wire from the moment it may have sent a
// packet to the origin, so a request that opens a connection is Wire'd (WireAndHold) at
// its connection attempt, after DNS and the SSRF check, and holds the domain until its
// first write returns (WriteAndHold moves the wire moment forward to the write, Wrote
// ends the hold) or EndHold says the attempt failed. Cancel gives back only an admission
// that never went on the wire; after Wire it is Done.
//
// Which method callers want:
//   - Allow: entries B and C. Refuses at once with the wait, never blocks.
//   - Reserve: entry A. Takes the next free slot (possibly in the future) unless that slot
//     is past a deadline (the lease's end).
//   - Wait: a redirect hop or anything that should simply wait its turn.
//
// The table is sharded by domain hash, so admissions of different domains rarely contend,
// and the common path (domain known, not limited) allocates nothing.
package limiter

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"downloader"
	"downloader/clock"
)

const shardCount = 256

// Limiter is safe for concurrent use. Create it with New; the zero value is not usable.
type Limiter struct {
	clk   clock.Clock
	epoch time.Time // every instant is stored as nanoseconds since epoch (monotonic)
	seed  maphash.Seed

	// lossNs is the moment the table was last lost (start-up or Reset). A domain with no
	// entry is treated as requested at that moment (conservative rebuild).
	lossNs atomic.Int64

	shards [shardCount]shard

	// observeWire, when set (ObserveWire), is told every request's wire moment.
	observeWire func(domain string, interval time.Duration, at time.Time)
}

// ObserveWire sets f to be told the wire moment of every admitted request that goes on
// the wire (main documents and redirect hops, of every entry), as Admission.OnWire tells
// its own callback: on the caller's goroutine, outside the limiter's locks; f must be
// safe for concurrent use and must not block. Call it before the limiter is used. It is
// what a crawl's politeness summary counts: the requests the limiter let out, not the
// sub-requests a render makes under its page's one admission (SPEC §2).
func (l *Limiter) ObserveWire(f func(domain string, interval time.Duration, at time.Time)) {
	l.observeWire = f
}

type shard struct {
	mu       sync.Mutex
	entries  map[string]*entry
	stats    shardStats
	inFlight int64    // sum of the entries' inFlight
	_        [32]byte // keep neighbouring shards' locks off one cache line
}

// entry is one domain's state. Its fields are guarded by the shard's mutex. An entry is
// removed from its shard (Reset, Sweep) only while nothing is in flight, so a live
// Admission may keep a pointer to it.
type entry struct {
	lastNs int64 // last_request_at: the latest admitted slot or wire moment
	// outNs is the latest moment a request went on the wire or was admitted to go out at
	// once (its slot was its decision time), and outSeq the admission that set it (0: a
	// loss). Wire spaces requests from it.
	outNs  int64
	overNs int64 // when the latest over-limit event happened (see overEntry)
	// holdNs: no request before it, the origin's own wait (hold.go); noHoldNs: none.
	holdNs     int64
	seq        uint32 // the latest admission's number, to tell admissions apart
	outSeq     uint32
	inFlight   int32
	intervalMs int32 // the interval of the latest admission
	source     sourceCode
	overEntry  entryCode // the entry of the latest over-limit event; 0 = never
	// holding: the request that set outNs went out through WireAndHold and has not said
	// Wrote yet; other requests wait (at most writeHoldMax) so that a writer descheduled
	// between the decision and its write cannot let the next request follow it early.
	holding  bool
	requests window // requests admitted, hourly over 24 h
}

// writeHoldMax bounds how long a request that went out through WireAndHold holds the
// domain's other requests while it writes: a safety net only, since every caller says
// Wrote (or Done) right after its write. It is long on purpose: a writer descheduled
// between its decision and its write, or between the write and Wrote, for as long as a
// loaded machine's scheduler takes (tens of ms were seen), must still hold. Past it the
// write is assumed done at the end of the hold.
const writeHoldMax = 10 * time.Second

// holdPoll is how often a request held by another's write looks again.
const holdPoll = time.Millisecond

// New returns a limiter whose table counts as lost at clk.Now(): every domain waits one
// interval from now before its first request (SPEC §2, loss and rebuild).
func New(clk clock.Clock) *Limiter {
	now := clk.Now()
	l := &Limiter{clk: clk, epoch: now, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].entries = make(map[string]*entry)
	}
	l.lossNs.Store(0)
	return l
}

// Clock returns the limiter's clock.
func (l *Limiter) Clock() clock.Clock { return l.clk }

func (l *Limiter) ns(t time.Time) int64 { return int64(t.Sub(l.epoch)) }

func (l *Limiter) at(ns int64) time.Time { return l.epoch.Add(time.Duration(ns)) }

func (l *Limiter) shardOf(domain string) *shard {
	return &l.shards[maphash.String(l.seed, domain)&(shardCount-1)]
}

// Admission is one admitted request. Call Wire when it goes on the wire and Done when it
// completes, or Cancel if it never goes out. The zero Admission is not admitted and its
// methods do nothing. An Admission is not safe for concurrent use.
type Admission struct {
	l        *Limiter
	s        *shard
	en       *entry // valid while the admission is live: see entry
	domain   string
	slotNs   int64
	interval int64 // this request's interval, ns
	// The entry as it was before this admission, for Cancel.
	prevLastNs int64
	prevOutNs  int64
	prevOutSeq uint32
	seq        uint32
	wired      bool
	done       bool
	// onWire, when set (OnWire), is told the request's wire moment once; wirePending: the
	// request went out through WireAndHold and the moment is told at Wrote (or Done).
	onWire      func(at time.Time)
	wirePending bool
}

// OnWire sets f to be called once with the request's wire moment on the limiter's clock:
// at Wire, or for WireAndHold at Wrote (or at Done if Wrote never came), so the moment is
// no earlier than the write. f runs on the caller's goroutine, outside the limiter's
// locks, and must not block (cluster mode queues it for TiKV). A request that never goes
// on the wire never calls f.
func (a *Admission) OnWire(f func(at time.Time)) { a.onWire = f }

// Admitted reports whether a is a live admission.
func (a *Admission) Admitted() bool { return a.l != nil }

// Domain returns the admitted domain.
func (a *Admission) Domain() string { return a.domain }

// Slot returns the instant the request may start (now for Allow, possibly later for Reserve).
func (a *Admission) Slot() time.Time { return a.l.at(a.slotNs) }

// Allow admits a request to domain now if its interval has passed since the domain's last
// request, and the origin's own wait (HoldDomain) is over, and returns the admission;
// otherwise it returns the wait until both are, records an over-limit event for entry and
// changes nothing else.
func (l *Limiter) Allow(now time.Time, domain string, interval time.Duration, source downloader.IntervalSource, e downloader.Entry) (Admission, time.Duration) {
	t := l.ns(now)
	s := l.shardOf(domain)
	s.mu.Lock()
	en := s.lookup(l, domain)
	if next := max(en.lastNs+int64(interval), en.holdNs); t < next {
		s.overLimit(en, e, t)
		s.mu.Unlock()
		return Admission{}, time.Duration(next - t)
	}
	a := s.admit(l, en, domain, t, t, interval, source)
	s.mu.Unlock()
	return a, 0
}

// Reserve takes the next slot for domain: now if the interval has passed (and the
// origin's own wait is over), otherwise the moment both are. If that slot is after deadline (and deadline is not zero), nothing is
// reserved and ok is false. A delayed reservation counts as an over-limit event for e.
func (l *Limiter) Reserve(now time.Time, domain string, interval time.Duration, source downloader.IntervalSource, e downloader.Entry, deadline time.Time) (a Admission, delay time.Duration, ok bool) {
	return l.reserve(now, domain, interval, source, e, deadline, true)
}

// ReservePaced is Reserve for a task whose source paces each domain itself (the local
// queue, downloader.Task.IsPaced): a delay is that pacing and is not recorded as an
// over-limit event (no trigger count, no over-limit state).
func (l *Limiter) ReservePaced(now time.Time, domain string, interval time.Duration, source downloader.IntervalSource, e downloader.Entry, deadline time.Time) (a Admission, delay time.Duration, ok bool) {
	return l.reserve(now, domain, interval, source, e, deadline, false)
}

func (l *Limiter) reserve(now time.Time, domain string, interval time.Duration, source downloader.IntervalSource, e downloader.Entry, deadline time.Time, isOverLimit bool) (a Admission, delay time.Duration, ok bool) {
	t := l.ns(now)
	s := l.shardOf(domain)
	s.mu.Lock()
	defer s.mu.Unlock()
	en := s.lookup(l, domain)
	slot := max(t, en.lastNs+int64(interval), en.holdNs)
	if slot > t {
		if isOverLimit {
			s.overLimit(en, e, t)
		}
		if !deadline.IsZero() && slot > l.ns(deadline) {
			return Admission{}, time.Duration(slot - t), false
		}
	}
	return s.admit(l, en, domain, t, slot, interval, source), time.Duration(slot - t), true
}

// Wait reserves the next slot for domain and blocks until it comes or ctx ends, in which
// case the reservation is given back. A ctx deadline earlier than the slot fails at once.
func (l *Limiter) Wait(ctx context.Context, domain string, interval time.Duration, source downloader.IntervalSource, e downloader.Entry) (Admission, error) {
	deadline, _ := ctx.Deadline()
	a, delay, ok := l.Reserve(l.clk.Now(), domain, interval, source, e, deadline)
	if !ok {
		return Admission{}, fmt.Errorf("limiter: %s: next slot in %v is past the deadline: %w", domain, delay, context.DeadlineExceeded)
	}
	if err := l.sleep(ctx, delay); err != nil {
		a.Cancel()
		return Admission{}, err
	}
	return a, nil
}

func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	return clock.Sleep(ctx, l.clk, d)
}

// lookup returns domain's entry, creating it as if requested at the moment of the last
// loss. Requires s.mu held.
func (s *shard) lookup(l *Limiter, domain string) *entry {
	en := s.entries[domain]
	if en == nil {
		loss := l.lossNs.Load()
		en = &entry{lastNs: loss, outNs: loss, holdNs: noHoldNs, requests: newWindow()}
		s.entries[domain] = en
	}
	return en
}

// admit records an admission at slot, decided at t. Requires s.mu held.
func (s *shard) admit(l *Limiter, en *entry, domain string, t, slot int64, interval time.Duration, source downloader.IntervalSource) Admission {
	en.seq++
	if en.seq == 0 {
		en.seq = 1 // 0 means "a loss" in outSeq
	}
	a := Admission{
		l: l, s: s, en: en, domain: domain, seq: en.seq, slotNs: slot, interval: int64(interval),
		prevLastNs: en.lastNs, prevOutNs: en.outNs, prevOutSeq: en.outSeq,
	}
	en.lastNs = slot
	if slot == t && !(en.holding && t < en.outNs+int64(writeHoldMax)) {
		// Admitted to go out at once (unless a write in progress holds the domain: then
		// this request's Wire waits for it).
		en.outNs, en.outSeq = t, en.seq
	}
	en.inFlight++
	s.inFlight++
	en.intervalMs = int32(interval / time.Millisecond)
	en.source = sourceCodeOf(source)
	h := hourOf(t)
	en.requests.add(h, 1)
	s.stats.requests.add(h, 1)
	return a
}

// overLimit records an over-limit event. Requires s.mu held.
func (s *shard) overLimit(en *entry, e downloader.Entry, t int64) {
	c := entryCodeOf(e)
	en.overEntry = c
	en.overNs = t
	if c != 0 {
		s.stats.triggers[c-1].add(hourOf(t), 1)
	}
}

// Wire is called the moment the admitted request goes on the wire (after DNS, connect and
// TLS). It returns 0 after moving last_request_at forward to now, or the time to wait
// before calling Wire again: until the slot, for a reservation called early, or until I
// after another request to the domain that went on the wire, or was admitted to go out at
// once, since this admission. While it waits its turn is held: no request admitted after
// that may start before it. Reservations whose slots are still ahead do not hold it back;
// their own Wire spaces them from it. Once the request is on the wire, Wire returns 0 and
// changes nothing.
func (a *Admission) Wire(now time.Time) time.Duration { return a.wire(now, false, false) }

// WireAndHold is Wire for a caller that reports the end of its first write with Wrote:
// until then (at most writeHoldMax) the domain's other requests wait, so the wire moment
// the next request is spaced from is the write's, however late the write runs.
func (a *Admission) WireAndHold(now time.Time) time.Duration { return a.wire(now, true, false) }

// WriteAndHold is WireAndHold for the request's first write when the request already went
// on the wire at its connection attempt (SPEC §2, a spent slot: the attempt is the wire
// moment of a request that opens a connection). The wire moment moves forward to now, and
// the hold goes on until Wrote. If another request of the domain went out since (only
// after this one's hold ran out, see writeHoldMax), it returns the wait until an interval
// after that one. On a request that is not on the wire yet it is WireAndHold.
func (a *Admission) WriteAndHold(now time.Time) time.Duration { return a.wire(now, true, true) }

func (a *Admission) wire(now time.Time, hold, again bool) time.Duration {
	if a.l == nil || a.done || (a.wired && !again) {
		return 0
	}
	t := a.l.ns(now)
	if t < a.slotNs {
		return time.Duration(a.slotNs - t)
	}
	d := a.claimWire(t, hold)
	if d == 0 && (a.onWire != nil || a.l.observeWire != nil) {
		if hold {
			a.wirePending = true
		} else if !a.wirePending {
			a.told(now)
		}
	}
	return d
}

// told tells the request's wire moment to its OnWire callback and the limiter's observer.
func (a *Admission) told(at time.Time) {
	if a.onWire != nil {
		a.onWire(at)
	}
	if f := a.l.observeWire; f != nil {
		f(a.domain, time.Duration(a.interval), at)
	}
}

// claimWire is wire's decision: it takes the shard's lock itself (a *Locked name would
// say the caller holds it).
func (a *Admission) claimWire(t int64, hold bool) time.Duration {
	s, en := a.s, a.en
	s.mu.Lock()
	defer s.mu.Unlock()
	if !a.wired && t < en.holdNs {
		// The origin asked for a wait after this request was admitted: it does not go
		// out before the wait is over (SPEC §2, the origin's own wait).
		return time.Duration(en.holdNs - t)
	}
	if en.outSeq != a.seq {
		if en.holding {
			if end := en.outNs + int64(writeHoldMax); t < end {
				return min(holdPoll, time.Duration(end-t))
			}
			// The writer never said Wrote: count its write as done at the end of its hold.
			en.holding = false
			en.outNs += int64(writeHoldMax)
			en.lastNs = max(en.lastNs, en.outNs)
		}
		if next := en.outNs + a.interval; t < next {
			en.lastNs = max(en.lastNs, next)
			return time.Duration(next - t)
		}
	}
	if en.outSeq != a.seq || t > en.outNs {
		en.outNs = t
	}
	en.outSeq, en.holding = a.seq, hold
	en.lastNs = max(en.lastNs, t)
	a.wired = true
	return 0
}

// EndHold ends the hold of a request whose connection attempt failed (refused, reset,
// timed out) before any of its bytes were written: the domain's next request is spaced
// from the attempt's start, its wire moment, not from the failure (which can come a
// connect timeout later). The OnWire callback is still told at Wrote or Done.
func (a *Admission) EndHold() {
	if a.l == nil || !a.wired || a.done {
		return
	}
	s, en := a.s, a.en
	s.mu.Lock()
	if en.outSeq == a.seq {
		en.holding = false
	}
	s.mu.Unlock()
}

// Wrote is called right after the request's first bytes were handed to the socket. If the
// request was the latest to go out, its wire moment moves forward to now on the limiter's
// clock (like WaitWire): a goroutine descheduled between Wire and the write must not let
// the next request follow early.
func (a *Admission) Wrote() {
	if a.l == nil || !a.wired || a.done {
		return
	}
	now := a.l.clk.Now()
	t := a.l.ns(now)
	s, en := a.s, a.en
	s.mu.Lock()
	if en.outSeq == a.seq {
		en.holding = false
		if t > en.outNs {
			en.outNs = t
			en.lastNs = max(en.lastNs, t)
		}
	}
	s.mu.Unlock()
	a.tellWire(now)
}

// tellWire calls the OnWire callback of a request that went out through WireAndHold.
func (a *Admission) tellWire(now time.Time) {
	if a.wirePending {
		a.wirePending = false
		a.told(now)
	}
}

// WaitWire calls Wire until it lets the request out, waiting on the limiter's clock, or
// until ctx ends.
func (a *Admission) WaitWire(ctx context.Context) error { return a.waitWire(ctx, false, false) }

// WaitWireAndHold is WaitWire with WireAndHold: the caller must call Wrote right after
// its first write (or Done).
func (a *Admission) WaitWireAndHold(ctx context.Context) error { return a.waitWire(ctx, true, false) }

// WaitWriteAndHold is WaitWire with WriteAndHold: the caller must call Wrote right after
// its first write (or Done).
func (a *Admission) WaitWriteAndHold(ctx context.Context) error { return a.waitWire(ctx, true, true) }

// wireNow is wire at the limiter's now: 0 for the zero Admission, which waits for nothing.
func (a *Admission) wireNow(hold, again bool) time.Duration {
	if a.l == nil {
		return 0
	}
	return a.wire(a.l.clk.Now(), hold, again)
}

func (a *Admission) waitWire(ctx context.Context, hold, again bool) error {
	if a.l == nil {
		return nil
	}
	for {
		// A request whose context ended must not go out: in cluster mode its in-flight
		// entry may already have expired for the other instances.
		if err := ctx.Err(); err != nil {
			return err
		}
		d := a.wire(a.l.clk.Now(), hold, again)
		if d == 0 {
			return nil
		}
		if err := a.l.sleep(ctx, d); err != nil {
			return err
		}
	}
}

// Done marks the request complete. Calling it more than once does nothing.
func (a *Admission) Done() {
	if a.l == nil || a.done {
		return
	}
	a.done = true
	s, en := a.s, a.en
	s.mu.Lock()
	if en.holding && en.outSeq == a.seq {
		// Finished without saying Wrote: its write, if any, is over by now.
		en.holding = false
		if t := a.l.ns(a.l.clk.Now()); t > en.outNs {
			en.outNs = t
			en.lastNs = max(en.lastNs, t)
		}
	}
	if en.inFlight > 0 {
		en.inFlight--
		s.inFlight--
	}
	s.mu.Unlock()
	if a.wirePending {
		a.tellWire(a.l.clk.Now())
	}
}

// Cancel gives back an admission whose request never went on the wire: if no request to
// the domain was admitted since, last_request_at returns to what it was before, but never
// before a wire moment or a loss that came in between. Safe to call after Done or Wire
// (then it only completes the request).
func (a *Admission) Cancel() {
	if a.l == nil || a.done {
		return
	}
	if !a.wired {
		s, en := a.s, a.en
		s.mu.Lock()
		if en.seq == a.seq {
			if en.outSeq == a.seq {
				en.outNs, en.outSeq = a.prevOutNs, a.prevOutSeq
			}
			en.lastNs = max(a.prevLastNs, en.outNs, a.l.lossNs.Load())
			en.seq = a.seq - 1 // the admission before this one may give its slot back too
		}
		s.mu.Unlock()
	}
	a.Done()
}

// Reset forgets every domain, as a loss of the table would: from now on a domain with no
// state is treated as requested at now (SPEC §2).
func (l *Limiter) Reset(now time.Time) {
	t := l.ns(now)
	for {
		old := l.lossNs.Load()
		if t <= old || l.lossNs.CompareAndSwap(old, t) {
			break
		}
	}
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for d, en := range s.entries {
			// An entry holding an origin's wait is kept: this process still knows the
			// wait, and forgetting it would let the next request out early (hold.go).
			if en.inFlight == 0 && en.holdNs <= t {
				delete(s.entries, d)
			} else if en.lastNs < t {
				en.lastNs = t
			}
		}
		s.mu.Unlock()
	}
}

// IntervalOf returns the interval and source of domain's latest admission, if known.
func (l *Limiter) IntervalOf(domain string) (time.Duration, downloader.IntervalSource, bool) {
	s := l.shardOf(domain)
	s.mu.Lock()
	defer s.mu.Unlock()
	en := s.entries[domain]
	if en == nil || en.seq == 0 {
		return 0, "", false
	}
	return time.Duration(en.intervalMs) * time.Millisecond, en.source.source(), true
}

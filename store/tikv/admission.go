package tikv

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader"
)

// # Admission
//
// Each admission is one optimistic transaction on its domain's key: read the record,
// decide, write it back (contention is per domain; the instance serialises its own
// admissions of one domain, so transactions conflict only across instances). A request
// for domain d with interval I is admitted at t when
//
//   - t >= last_request_at + I, plus MaxClockSkew when another instance set
//     last_request_at (their clock, not ours: see Runtime); and
//   - no request admitted by another instance is in flight and not yet on the wire. Such
//     a request may go on the wire at any moment until its instance writes back when it
//     did (SharedTicket.Wired, queued the moment its first bytes were written: then
//     wire_at is set in its entry and last_request_at moves to it), or until it expires
//     (slot + timeout: by then it went out or never will). Requests of this instance do
//     not count: its local limiter already spaces their wire moments.
//
// Entry A (Reserve) takes a future slot when the domain is only waiting for its interval,
// and asks again later while another instance has a request in flight. When the request
// ends, its ticket writes back last_request_at = max(last_request_at, wire moment) and
// removes it from in_flight (writeback.go), so the next request, from any instance, waits
// one interval from the moment this one reached the origin.

// admissionState is the admission's own state (a part of Runtime).
type admissionState struct {
	seq  atomic.Uint64 // admission ids
	seed maphash.Seed
	// stripes serialise this instance's admissions and write-backs of one domain (by hash),
	// so that its own transactions do not conflict: a channel of one token each, so that
	// waiting for one honours the admission's deadline. A write-back batch holds the
	// stripes of its domains while it commits: there are many, so that an admission rarely
	// waits for a batch it has no domain in (docs/benchmarks-tikv.md).
	stripes []chan struct{}

	// admits holds the admissions waiting for a batch (group admission, below).
	admits admitQueue
}

// init sets a up with stripeCount stripes.
func (a *admissionState) init(stripeCount int) {
	a.seed = maphash.MakeSeed()
	a.stripes = make([]chan struct{}, stripeCount)
	for i := range a.stripes {
		a.stripes[i] = make(chan struct{}, 1)
	}
}

// defaultStripeCount is the number of per-domain stripes (admissionState.stripes). With 256, a
// write-back batch of 64 domains held a quarter of them while it committed, and admissions
// spent most of their waiting there (block profile of BenchmarkAdmission).
const defaultStripeCount = 4096

// foreignWaitHint bounds the wait announced while another instance has a request of the
// domain in flight: its real end is unknown, and most requests take under a second.
const foreignWaitHint = time.Second

func (r *Runtime) stripeOf(domain string) int {
	return int(maphash.String(r.seed, domain) % uint64(len(r.stripes)))
}

// lockStripe takes stripe i, or gives up when ctx ends.
func (r *Runtime) lockStripe(ctx context.Context, i int) error {
	select {
	case r.stripes[i] <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Runtime) unlockStripe(i int) { <-r.stripes[i] }

// decision is what an admission found.
type decision struct {
	slot    time.Time     // the admitted slot
	wait    time.Duration // refused: ask again after wait
	admit   bool
	pruned  []inFlight // rec.InFlightRequests without the expired entries
	timeout time.Duration
}

// decide applies the admission rule (see Runtime) to rec at now.
func (r *Runtime) decide(rec *domainRecord, a *downloader.SharedAdmit, now time.Time) decision {
	skew := r.skew()
	r.foldExpired(rec, now)
	base := rec.LastRequestAt
	if !r.isMine(rec.LastInstanceID, rec.LastIncarnationID) {
		base = base.Add(skew)
	}
	next := base.Add(a.MinInterval)
	d := decision{slot: now}
	if next.After(now) {
		d.slot = next
	}
	var foreign time.Time // the latest moment another instance's request may go out
	for _, f := range rec.InFlightRequests {
		if exp := f.ExpiresAt.Add(skew); !r.isMine(f.InstanceID, f.IncarnationID) && f.WireAt.IsZero() && exp.After(foreign) {
			foreign = exp
		}
	}
	d.pruned = rec.InFlightRequests
	if !foreign.IsZero() {
		// Another instance has a request of the domain in flight and not yet on the wire
		// as far as we know: its wire moment is known only as a bound. Ask again when the
		// interval allows, or within a second (its Wired write-back usually comes sooner).
		d.wait = max(d.slot.Sub(now), min(foreign.Add(a.MinInterval).Sub(now), max(a.MinInterval, foreignWaitHint)))
		return d
	}
	if d.slot.After(now) && (!a.Reserve || (!a.Deadline.IsZero() && d.slot.After(a.Deadline))) {
		d.wait = d.slot.Sub(now)
		return d
	}
	d.admit = true
	d.timeout = a.Timeout
	if d.timeout <= 0 {
		d.timeout = r.cfg.DefaultTimeout
	}
	return d
}

// Admit takes domain's cluster-wide admission (downloader.SharedRuntime). It fails closed with
// an EUNAVAILABLE error when TiKV does not answer within AdmitTimeout.
func (r *Runtime) Admit(ctx context.Context, a downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AdmitTimeout)
	defer cancel()
	key := domainKey(a.Domain)
	stripe := r.stripeOf(a.Domain)
	if err := r.lockStripe(ctx, stripe); err != nil {
		return nil, 0, unavailable("admit "+a.Domain, err)
	}
	defer r.unlockStripe(stripe)
	ctx, release, err := r.s.acquire(ctx, "admit")
	if err != nil {
		return nil, 0, err
	}
	defer release()

	// Self-fencing (membership.go): nothing is admitted once this instance's heartbeat is
	// late, its clock is off, or its id is another process's.
	if _, err := r.fence(r.now(a.Now)); err != nil {
		return nil, 0, err
	}
	// Decided with the other admissions pending at this moment, in one transaction
	// (group admission, below); this domain's stripe stays held meanwhile.
	req := &admitReq{a: &a, key: key, id: r.seq.Add(1), done: make(chan struct{}), wake: make(chan struct{}, 1)}
	r.admitGrouped(ctx, req)
	d, now, err := req.d, req.now, req.err
	if req.isFenced {
		return nil, 0, err
	}
	if errors.Is(err, errLeaseEnded) {
		return nil, 0, r.fenceErr(errLeaseEnded)
	}
	if err != nil {
		return nil, 0, unavailable("admit "+a.Domain, err)
	}
	if !d.admit {
		return nil, d.wait, nil
	}
	// The commit may have taken long: the request goes out only if this instance is still
	// in good standing (else its entry just expires).
	if _, err := r.fence(r.clk.Now()); err != nil {
		return nil, 0, err
	}
	return &ticket{r: r, domain: a.Domain, id: req.id}, d.slot.Sub(now), nil
}

// ticket is one admitted request (downloader.SharedTicket).
type ticket struct {
	r      *Runtime
	domain string
	id     uint64
	wired  atomic.Bool
	done   atomic.Bool
}

// Wired queues the write-back of the request's wire moment (writeback.go): wire_at in its
// in-flight entry, and last_request_at moves to it, so the other instances space their
// next request from it instead of waiting for this one to end. It never blocks: when the
// writer is not running or its queue is full it does nothing, and the others wait for Done
// or the entry's expiry as before.
func (t *ticket) Wired(at time.Time) {
	if t.done.Load() || !t.wired.CompareAndSwap(false, true) {
		return
	}
	t.r.enqueue(writeBack{domain: t.domain, id: t.id, wireAt: at, isWired: true})
}

// Done writes back the request's end (writeback.go): last_request_at moves to wireAt if
// that is later, and the request leaves in_flight. While Run runs, the write-back is
// queued and written with others in one transaction, off the request's path; otherwise
// (or when the queue is full) it is written before Done returns. If TiKV cannot be reached
// the entry stays until it expires, which only delays the domain's next request on other
// instances.
func (t *ticket) Done(ctx context.Context, wireAt time.Time) {
	if !t.done.CompareAndSwap(false, true) {
		return
	}
	wb := writeBack{domain: t.domain, id: t.id, wireAt: wireAt}
	if t.r.enqueue(wb) {
		return
	}
	t.r.flush(ctx, []writeBack{wb})
}

// # Group admission: admissions of different domains share one transaction
//
// An admission is a read-check-write of one domain's key: a start timestamp, a read, the
// commit's timestamp and a prewrite (and a commit when TiKV does not apply one-phase
// commit). Those round trips, and most of the client's and TiKV's CPU per transaction, do
// not depend on how many keys the transaction has. So the admissions that wait at the same
// moment are decided together (group commit): one transaction reads their keys in one
// BatchGet, applies the rule (SPEC §2) to each record as Admit alone would, writes the
// admitted ones, and commits once.
//
// Safety is that of one admission per transaction:
//   - One domain's admissions stay serial: Admit holds the domain's stripe while its
//     admission waits for and runs in a batch, so a batch never has two admissions of one
//     domain (nor of one stripe), and no two running batches share a key.
//   - Each record is read and written in the batch's transaction: a write of another
//     instance to any of its keys after its start fails the commit, and the whole batch is
//     decided again on fresh reads (store.update), as one admission would be.
//   - The lease (self-fencing) is checked for every member at its own decision time, and
//     again after the commit before any ticket is given.
//
// Latency: nothing waits for a batch to fill. A caller finding fewer than maxAdmitBatches
// batches running starts one at once with whatever is pending (alone, when the instance
// is quiet); the others queue and go in the next batch as one finishes. The cost is
// coupling: a batch takes as long as its slowest key's region, and a conflict on one key
// retries the batch's others too.

const (
	// maxAdmitBatch bounds the admissions of one transaction (as a write-back batch's
	// domains: 64 keys stay within async commit's limits, 256 keys and 4 KiB of keys).
	maxAdmitBatch = 64
	// maxAdmitBatches is how many batches an instance runs at once: the pipeline depth.
	maxAdmitBatches = 4
)

// admitReq is one admission waiting for, or decided in, a batch.
type admitReq struct {
	a   *downloader.SharedAdmit
	key []byte
	id  uint64 // the admission id its in-flight entry gets
	// Results, written by the batch before done is closed.
	d   decision
	now time.Time
	err error
	// isFenced: err is the fence's (returned as is, EUNAVAILABLE with its cause).
	isFenced bool

	done chan struct{}
	wake chan struct{} // one token: a batch slot may be free, look again
}

// admitQueue holds the admissions not yet in a batch.
type admitQueue struct {
	mu      sync.Mutex
	pending []*admitReq
	running int // batches running
}

// admitGrouped decides req in a batch: run by the caller itself (it leads a batch of the
// pending admissions when a slot is free) or by another caller's batch. It returns once
// req is decided or, while it is still pending, when ctx ends.
func (r *Runtime) admitGrouped(ctx context.Context, req *admitReq) {
	q := &r.admits
	q.mu.Lock()
	q.pending = append(q.pending, req)
	for {
		select {
		case <-req.done:
			q.mu.Unlock()
			return
		default:
		}
		if q.running < maxAdmitBatches && len(q.pending) > 0 {
			n := min(len(q.pending), maxAdmitBatch)
			batch := slices.Clone(q.pending[:n])
			q.pending = slices.Delete(q.pending, 0, n)
			q.running++
			q.mu.Unlock()
			r.runAdmitBatch(ctx, batch)
			q.mu.Lock()
			q.running--
			q.wakeNextLocked()
			continue
		}
		q.mu.Unlock()
		select {
		case <-req.done:
			return
		case <-req.wake:
		case <-ctx.Done():
			q.mu.Lock()
			if i := slices.Index(q.pending, req); i >= 0 {
				q.pending = slices.Delete(q.pending, i, i+1)
				q.wakeNextLocked() // it may have been woken to lead: pass that on
				q.mu.Unlock()
				req.err = ctx.Err()
				return
			}
			q.mu.Unlock()
			<-req.done // in a batch already: it ends within AdmitTimeout
			return
		}
		q.mu.Lock()
	}
}

// wakeNextLocked tells the first pending admission to look for a free batch slot.
func (q *admitQueue) wakeNextLocked() {
	if len(q.pending) == 0 || q.running >= maxAdmitBatches {
		return
	}
	select {
	case q.pending[0].wake <- struct{}{}:
	default:
	}
}

// runAdmitBatch decides every admission of batch in one transaction and closes their done
// channels. Its deadline is AdmitTimeout from now, whatever the leading caller's context:
// the batch decides the others' admissions too.
func (r *Runtime) runAdmitBatch(ctx context.Context, batch []*admitReq) {
	defer func() {
		for _, req := range batch {
			close(req.done)
		}
	}()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.AdmitTimeout)
	defer cancel()
	lease, err := r.fence(r.clk.Now())
	if err != nil {
		for _, req := range batch {
			req.err, req.isFenced = err, true
		}
		return
	}
	inc := r.inc.Load()
	keys := make([][]byte, 0, len(batch)+1)
	for _, req := range batch {
		keys = append(keys, req.key)
	}
	// The loss marker rides along: a domain without a record needs it.
	keys = append(keys, []byte(lossKey))
	err = r.s.update(ctx, func(txn *transaction.KVTxn) error {
		got, err := txn.BatchGet(ctx, keys)
		if err != nil {
			return err
		}
		for _, req := range batch {
			req.err, req.d = nil, decision{}
			now := r.now(req.a.Now)
			req.now = now
			if !now.Before(lease) {
				return errLeaseEnded
			}
			rec, err := r.recordIn(ctx, txn, got, req.key, now)
			if bad := (*badRecordError)(nil); errors.As(err, &bad) {
				req.err = err // one bad record fails its own admission only
				continue
			}
			if err != nil {
				return err
			}
			d := r.decide(&rec, req.a, now)
			if d.admit && d.slot.After(lease) {
				// A reserved slot past the lease: the others may drop this instance before
				// then. Ask again at the slot (the lease is renewed by then, normally).
				d.admit, d.wait = false, d.slot.Sub(now)
			}
			req.d = d
			if !d.admit {
				continue // nothing to write
			}
			rec.LastRequestAt, rec.LastInstanceID, rec.LastIncarnationID = d.slot.UTC(), r.id, inc
			rec.MinIntervalMs, rec.IntervalSource = req.a.MinInterval.Milliseconds(), string(req.a.IntervalSource)
			rec.InFlightRequests = append(d.pruned, inFlight{InstanceID: r.id, IncarnationID: inc, AdmissionID: req.id,
				SlotAt: d.slot.UTC(), ExpiresAt: d.slot.Add(d.timeout + r.cfg.ExpirySlack).UTC()})
			if err := r.put(txn, req.key, &rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		for _, req := range batch {
			req.err = err
		}
	}
}

package tikv

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader/engine"
)

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
	a   *engine.SharedAdmit
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
			var rec domainRecord
			if v, ok := got[string(req.key)]; ok {
				if err := json.Unmarshal(v, &rec); err != nil {
					// One bad record fails its own admission only.
					req.err = fmt.Errorf("decode %s: %w", req.key, err)
					continue
				}
			} else {
				lossAt, err := r.lossAt(ctx, txn, now)
				if err != nil {
					return err
				}
				rec = domainRecord{LastRequestAt: lossAt}
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

package tikv

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/tikv/client-go/v2/txnkv/transaction"
)

// writeBackState is the write-back queue (a part of Runtime): wbOn while Run's writer
// takes from wbQueue.
type writeBackState struct {
	wbMu    sync.Mutex
	wbOn    bool
	wbQueue chan writeBack
}

// writeBack is one finished request to write back to its domain's record.
type writeBack struct {
	domain string
	id     uint64 // the admission's id in the record's in_flight
	wireAt time.Time
	// isWired: the request went on the wire at wireAt and goes on (Ticket.Wired): its
	// entry stays, with wire_at; otherwise the request ended (Done) and its entry leaves.
	isWired bool
}

// Write-back batching: the queue absorbs bursts; a batch is what accumulated while the
// previous one was being written, up to writeBackBatch domains' worth.
const (
	writeBackQueueLength = 4096
	writeBackBatch       = 64
)

// enqueue hands wb to the writer; false when it is not running or its queue is full.
func (r *Runtime) enqueue(wb writeBack) bool {
	r.wbMu.Lock()
	defer r.wbMu.Unlock()
	if !r.wbOn {
		return false
	}
	select {
	case r.wbQueue <- wb:
		return true
	default:
		return false
	}
}

// startWriter starts the writer and returns the function that stops it after it wrote
// everything queued.
func (r *Runtime) startWriter() (stop func()) {
	r.wbMu.Lock()
	if r.wbQueue == nil {
		r.wbQueue = make(chan writeBack, writeBackQueueLength)
	}
	r.wbOn = true
	r.wbMu.Unlock()
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case wb := <-r.wbQueue:
				r.flush(context.Background(), r.drain(wb))
			case <-quit:
				// No enqueue can happen any more (wbOn is false): write what is left.
				for {
					select {
					case wb := <-r.wbQueue:
						r.flush(context.Background(), r.drain(wb))
					default:
						return
					}
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.wbMu.Lock()
			r.wbOn = false
			r.wbMu.Unlock()
			close(quit)
			<-done
		})
	}
}

// drain returns first and what else is queued, up to a batch of writeBackBatch domains (a
// request's Wired and Done count once: they update one record).
func (r *Runtime) drain(first writeBack) []writeBack {
	batch := []writeBack{first}
	domains := map[string]struct{}{first.domain: {}}
	for len(domains) < writeBackBatch && len(batch) < 4*writeBackBatch {
		select {
		case wb := <-r.wbQueue:
			batch = append(batch, wb)
			domains[wb.domain] = struct{}{}
		default:
			return batch
		}
	}
	return batch
}

// flush writes batch back in one transaction (retried while it conflicts), holding this
// instance's locks of the domains involved, taken in one order.
func (r *Runtime) flush(ctx context.Context, batch []writeBack) {
	byDomain := map[string][]writeBack{}
	for _, wb := range batch {
		byDomain[wb.domain] = append(byDomain[wb.domain], wb)
	}
	var stripes []int
	for d := range byDomain {
		stripes = append(stripes, r.stripeOf(d))
	}
	slices.Sort(stripes)
	stripes = slices.Compact(stripes)
	for _, i := range stripes {
		_ = r.lockStripe(context.Background(), i) // no deadline: cannot fail
	}
	defer func() {
		for _, i := range stripes {
			r.unlockStripe(i)
		}
	}()
	ctx, release, err := r.s.acquire(ctx, "write back")
	if err != nil {
		r.log.Warn("write back finished requests: their in-flight entries will expire instead", "request_count", len(batch), "error", err)
		return
	}
	defer release()
	domains := make([]string, 0, len(byDomain))
	keys := make([][]byte, 0, len(byDomain))
	for d := range byDomain {
		domains = append(domains, d)
		keys = append(keys, domainKey(d))
	}
	err = r.s.update(ctx, func(txn *transaction.KVTxn) error {
		now := r.clk.Now()
		got, err := txn.BatchGet(ctx, keys)
		if err != nil {
			return err
		}
		for i, d := range domains {
			// A record lost since the admission is rebuilt from the loss marker, then this
			// request.
			rec, err := r.recordIn(ctx, txn, got, keys[i], now)
			if err != nil {
				return err
			}
			r.applyWriteBacks(&rec, byDomain[d], now)
			if err := r.put(txn, keys[i], &rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		r.log.Warn("write back finished requests: their in-flight entries will expire instead", "request_count", len(batch), "error", err)
	}
}

// applyWriteBacks removes the finished requests from rec.InFlightRequests, sets wire_at on
// the ones that went on the wire, folds the expired ones (foldExpired), and moves
// last_request_at to the latest wire moment if that is later.
func (r *Runtime) applyWriteBacks(rec *domainRecord, wbs []writeBack, now time.Time) {
	kept := rec.InFlightRequests[:0]
	for _, f := range rec.InFlightRequests {
		if r.isMine(f.InstanceID, f.IncarnationID) {
			if slices.ContainsFunc(wbs, func(wb writeBack) bool { return wb.id == f.AdmissionID && !wb.isWired }) {
				continue
			}
			for _, wb := range wbs {
				if wb.id == f.AdmissionID && wb.isWired && wb.wireAt.After(f.WireAt) {
					f.WireAt = wb.wireAt.UTC()
				}
			}
		}
		kept = append(kept, f)
	}
	rec.InFlightRequests = kept
	r.foldExpired(rec, now)
	for _, wb := range wbs {
		if wb.wireAt.After(rec.LastRequestAt) {
			rec.LastRequestAt, rec.LastInstanceID, rec.LastIncarnationID = wb.wireAt.UTC(), r.id, r.inc.Load()
		}
	}
}

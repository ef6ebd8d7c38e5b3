package tikv

import (
	"context"
	"encoding/json"
	"time"

	"github.com/tikv/client-go/v2/oracle"
	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader"
	"downloader/store/keys"
)

// The sweep: the oldest live instance deletes, every SweepInterval, the domain records
// that can no longer refuse anything, and advances TiKV's GC safe point.

// sweepBatch is how many records one sweep transaction looks at.
const sweepBatch = 256

// Sweep deletes the domain records that can no longer refuse any request: nothing in
// flight (or only expired entries) and last_request_at older than the largest interval the
// service accepts (plus the clock skew allowance). A missing record reads as requested at
// the loss marker's moment, which is earlier still, so deleting one changes no decision.
// It returns how many it deleted.
func (r *Runtime) Sweep(ctx context.Context, now time.Time) (int, error) {
	horizon := downloader.MaxMinInterval + r.skew()
	deleted := 0
	start := []byte(domainRuntimePrefix)
	end := keys.PrefixEnd(domainRuntimePrefix)
	for {
		var last []byte
		n, err := r.sweepBatch(ctx, start, end, now, horizon, &last)
		if err != nil {
			return deleted, err
		}
		deleted += n
		if last == nil {
			return deleted, nil
		}
		start = append(last, 0)
	}
}

// sweepBatch looks at up to sweepBatch records from start, deletes those that can no
// longer refuse anything, and sets *last to the last key seen (nil at the end).
func (r *Runtime) sweepBatch(ctx context.Context, start, end []byte, now time.Time, horizon time.Duration, last *[]byte) (int, error) {
	ctx, release, err := r.s.acquire(ctx, "sweep")
	if err != nil {
		return 0, err
	}
	defer release()
	n := 0
	err = r.s.update(ctx, func(txn *transaction.KVTxn) error {
		n, *last = 0, nil
		// The snapshot's iterator, not the transaction's: the scan may outlive this call
		// (scanWithin), and the transaction has written nothing yet.
		snap := txn.GetSnapshot()
		type seen struct {
			doomed [][]byte
			last   []byte
		}
		got, err := scanWithin(ctx, snap, func() (seen, error) {
			var sn seen
			it, err := snap.Iter(start, end)
			if err != nil {
				return sn, err
			}
			defer it.Close()
			for i := 0; it.Valid() && i < sweepBatch; i++ {
				k := append([]byte(nil), it.Key()...)
				sn.last = k
				if len(k) > len(domainRuntimePrefix) && k[len(domainRuntimePrefix)] != ':' {
					var rec domainRecord
					if json.Unmarshal(it.Value(), &rec) == nil && r.sweepable(&rec, now, horizon) {
						sn.doomed = append(sn.doomed, k)
					}
				}
				if err := it.Next(); err != nil {
					return sn, err
				}
			}
			return sn, nil
		})
		if err != nil {
			return err
		}
		*last = got.last
		for _, k := range got.doomed {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		n = len(got.doomed)
		return nil
	})
	if err != nil {
		return 0, unavailable("sweep", err)
	}
	return n, nil
}

func (r *Runtime) sweepable(rec *domainRecord, now time.Time, horizon time.Duration) bool {
	r.foldExpired(rec, now)
	return len(rec.InFlightRequests) == 0 && !rec.LastRequestAt.Add(horizon).After(now)
}

// sweepLoop runs the sweep and TiKV's GC every SweepInterval on the oldest live instance.
func (r *Runtime) sweepLoop(ctx context.Context) {
	for {
		if err := r.sleep(ctx, r.cfg.SweepInterval); err != nil {
			return
		}
		if !r.isOldest() {
			continue
		}
		now := r.clk.Now()
		if n, err := r.Sweep(ctx, now); err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("sweep of downloader:domain_runtime failed", "error", err)
		} else if n > 0 {
			r.log.Info("swept downloader:domain_runtime", "deleted_count", n)
		}
		if err := r.collectGarbage(ctx, now); err != nil && ctx.Err() == nil {
			r.log.Warn("TiKV garbage collection failed", "error", err)
		}
	}
}

// collectGarbage advances TiKV's GC safe point to now - GCLifeTime (see RuntimeConfig);
// every transaction of the downloader is far shorter than that.
func (r *Runtime) collectGarbage(ctx context.Context, now time.Time) error {
	if r.cfg.GCLifeTime <= 0 {
		return nil
	}
	// The whole cluster's locks are resolved: this one gets more than an operation's time.
	ctx, release, err := r.s.acquireFor(ctx, "gc", time.Minute)
	if err != nil {
		return err
	}
	defer release()
	if _, err := r.s.kv.GC(ctx, oracle.GoTimeToTS(now.Add(-r.cfg.GCLifeTime))); err != nil {
		return unavailable("gc", err)
	}
	return nil
}

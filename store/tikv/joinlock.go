package tikv

import (
	"context"
	"errors"
	"fmt"

	"github.com/pingcap/kvproto/pkg/kvrpcpb"
	tikvclient "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/tikvrpc"
	"github.com/tikv/client-go/v2/txnkv/txnlock"
)

// clearLeftLock removes a lock that a process holding no lease under this id left on
// this id's heartbeat record, so that the joining heartbeat (startTS) can write it at
// once: it rolls the lock's transaction back, or commits it when its primary already was.
//
// Why: a process that dies between a heartbeat's prewrite and its commit (a crash, a
// partition, a heartbeat that timed out with its commit in flight) leaves a lock on its
// record that TiKV lets any other transaction resolve only when client-go's lock TTL has
// passed: 3 s from that heartbeat's prewrite plus the time the heartbeat had spent
// reading. A restarted process under the same id waits InstanceTTL for the dead record to
// expire, and its first write of the record then waits for the rest of that TTL: with a
// lease shorter than the lock TTL (the tests' 2 s, cmd's cluster test's 1 s) or a slow
// read before the prewrite, past its own heartbeat deadline, and Start fails. The
// transaction it rolls back is a heartbeat of a process that holds no lease under this
// id (viewIn refused the join while any live incarnation holds the record): rolling it
// back takes nothing from a live process; a late commit of it would only have renewed a
// lease the caller has already found expired.
//
// A lock of TiKV's async commit is not rolled back this way (client-go decides its fate
// from the lock's own TTL whatever the caller asks); a heartbeat that TiKV committed in
// one phase (Store.begin asks for it) leaves no lock to clear. The mock cluster commits
// every transaction in two phases, as TiKV does when it declines one-phase commit.
func (r *Runtime) clearLeftLock(ctx context.Context, startTS uint64) error {
	key := []byte(instancePrefix + r.id)
	bo := tikvclient.NewBackofferWithVars(ctx, tsoMaxBackoffMs, nil)
	for {
		loc, err := r.s.kv.GetRegionCache().LocateKey(bo, key)
		if err != nil {
			return fmt.Errorf("locate %s: %w", key, err)
		}
		req := tikvrpc.NewRequest(tikvrpc.CmdGet, &kvrpcpb.GetRequest{Key: key, Version: startTS})
		resp, err := r.s.kv.SendReq(bo, req, loc.Region, r.cfg.AdmitTimeout)
		if err != nil {
			return fmt.Errorf("read the lock of %s: %w", key, err)
		}
		regionErr, err := resp.GetRegionError()
		if err != nil {
			return fmt.Errorf("read the lock of %s: %w", key, err)
		}
		if regionErr != nil {
			if err := bo.Backoff(tikvclient.BoRegionMiss(), errors.New(regionErr.String())); err != nil {
				return fmt.Errorf("read the lock of %s: %w", key, err)
			}
			continue
		}
		get, ok := resp.Resp.(*kvrpcpb.GetResponse)
		if !ok || get.GetError().GetLocked() == nil {
			return nil // no lock (or an error the heartbeat's own write meets again)
		}
		lock := txnlock.NewLock(get.GetError().GetLocked())
		r.log.Warn("this instance id's heartbeat record is locked by a transaction of a process that holds no lease: resolving it",
			"lock_start_ts", lock.TxnID, "lock_ttl_ms", lock.TTL)
		// TTL 0 is client-go's "resolve unconditionally": its lock resolver then asks
		// TiKV for the transaction's status as if the lock's TTL had passed.
		lock.TTL = 0
		if _, err := r.s.kv.GetLockResolver().ResolveLocks(bo, startTS, []*txnlock.Lock{lock}); err != nil {
			return fmt.Errorf("resolve the lock of %s: %w", key, err)
		}
		return nil
	}
}

package tikv

import (
	"context"
	"sync/atomic"

	"github.com/tikv/client-go/v2/kv"
	"github.com/tikv/client-go/v2/txnkv/txnsnapshot"
)

// scanWithin runs read, which reads through snap's iterators (Iter), and returns what it
// returns, or ctx's error as soon as ctx ends.
//
// client-go's scanner ignores the caller's context: it retries on a context of its own
// (context.Background) for up to 20 s of backoff, each request with a 60 s deadline. Read
// directly, a scan of a region that does not answer would hold a heartbeat (the lease),
// Start, the instance list or a results page far past its deadline, where every other
// read of the store fails closed at it (SPEC §2: nothing is admitted on a guess). So the
// scan runs on a goroutine of its own and the caller leaves at its deadline; the scan is
// told to stop (the snapshot's killed flag, which client-go checks before each retry and
// after each backoff) and ends by itself at the latest when its request does. read must
// share nothing with the caller but what it returns.
func scanWithin[T any](ctx context.Context, snap *txnsnapshot.KVSnapshot, read func() (T, error)) (T, error) {
	killed := new(uint32)
	snap.SetVars(kv.NewVariables(killed))
	type result struct {
		v   T
		err error
	}
	got := make(chan result, 1)
	go func() {
		v, err := read()
		got <- result{v, err}
	}()
	select {
	case r := <-got:
		return r.v, r.err
	case <-ctx.Done():
		atomic.StoreUint32(killed, 1)
		var zero T
		return zero, ctx.Err()
	}
}

package embedded

import (
	"context"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// A task scope gathers what entry A writes for one task, its page and its fetch_result,
// so that they are committed with the task's report in the outbox as one batch: one pass
// through Pebble's commit pipeline (whose single writer appends each batch to the
// write-ahead log in turn) and one fsync shared with concurrent tasks, instead of three of
// each. Nothing is acknowledged before that commit, so the page and the result are as
// durable as before when the task is acknowledged (SPEC §1: at least once).
//
// The scope travels in the context the lease loop hands the runner (WithTaskWrites, which
// the outbox's WithTaskWrites calls): the engine calls PutPage and PutFetchResult as usual,
// and this Store, finding a scope of its own in ctx, adds their writes to it instead of
// committing them; the outbox's PutReport takes them into its batch (Keyspace.TaskBatch).
// Another store (TiKV) ignores the scope and commits as it always does.

type taskScopeKey struct{}

// taskScope is the pending writes of one task. Safe for concurrent use, although one task
// writes from one goroutine.
type taskScope struct {
	s  *Store
	mu sync.Mutex
	// ops are the pending sets, in the order they were made.
	ops []taskOp
	// pages are the page writes registered in s.pageWrites by this scope: others writing
	// the same body wait for this scope's commit.
	pages []scopePage
}

type taskOp struct{ key, value []byte }

type scopePage struct {
	key string
	w   *pageWrite
}

// scopeOf returns the task scope of s carried by ctx, or nil.
func (s *Store) scopeOf(ctx context.Context) *taskScope {
	sc, _ := ctx.Value(taskScopeKey{}).(*taskScope)
	if sc == nil || sc.s != s {
		return nil
	}
	return sc
}

func (sc *taskScope) add(key, value []byte) {
	sc.mu.Lock()
	sc.ops = append(sc.ops, taskOp{key: key, value: value})
	sc.mu.Unlock()
}

func (sc *taskScope) addPage(key string, w *pageWrite, dbKey, value []byte) {
	sc.mu.Lock()
	sc.ops = append(sc.ops, taskOp{key: dbKey, value: value})
	sc.pages = append(sc.pages, scopePage{key: key, w: w})
	sc.mu.Unlock()
}

// batch returns a new batch holding the scope's pending writes. Requires sc.mu held.
func (sc *taskScope) batchLocked() (*pebble.Batch, error) {
	b := sc.s.db.NewBatch()
	for _, op := range sc.ops {
		if err := b.Set(op.key, op.value, nil); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("embedded store: task writes: %w", err)
		}
	}
	return b, nil
}

// committedLocked forgets the writes now durable (err nil) or given up (err set) and wakes
// those waiting for the scope's pages. Requires sc.mu held.
func (sc *taskScope) committedLocked(err error) {
	if err == nil {
		sc.s.pageWriteCount.Add(int64(len(sc.pages)))
	}
	for _, p := range sc.pages {
		p.w.err = err
		sc.s.endPageWrite(p.key, p.w)
	}
	sc.ops, sc.pages = nil, nil
}

// end commits, synchronously, whatever the scope still holds (a task that stored a result
// and then made no report), so that nothing the runner stored is lost, and wakes those
// waiting for its pages either way.
func (sc *taskScope) end() error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if len(sc.ops) == 0 {
		sc.committedLocked(nil)
		return nil
	}
	release, err := sc.s.acquire(context.Background(), "task writes")
	if err != nil {
		sc.committedLocked(err)
		return err
	}
	defer release()
	b, err := sc.batchLocked()
	if err == nil {
		err = b.Commit(pebble.Sync)
		_ = b.Close()
		if err != nil {
			err = fmt.Errorf("embedded store: task writes: %w", err)
		}
	}
	sc.committedLocked(err)
	return err
}

// hasPage reports whether the scope already holds the page key.
func (sc *taskScope) hasPage(key string) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, p := range sc.pages {
		if p.key == key {
			return true
		}
	}
	return false
}

// WithTaskWrites returns a context under which this Store defers the task's PutPage and
// PutFetchResult to the first commit of a Keyspace's TaskBatch under it (the outbox's
// PutReport), which commits them and the report in one synchronous batch. end must be
// called when the task is done: it commits what no report took (synchronously) and
// releases the scope; its error is also logged by the caller.
func (s *Store) WithTaskWrites(ctx context.Context) (context.Context, func() error) {
	sc := &taskScope{s: s}
	return context.WithValue(ctx, taskScopeKey{}, sc), sc.end
}

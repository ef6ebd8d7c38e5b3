package embedded

import (
	"bytes"
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// The prefixes this store hands to the packages that keep a table of their own in its
// database (Keyspace): they persist in the same Pebble DB, so that entry A's writes of one
// task (page, fetch_result, report) are one batch, but their logic is theirs.
const (
	// LocalQueuePrefix is the local queue's (package localqueue): it stands in for the
	// scheduler, another service, hence its own service name.
	LocalQueuePrefix = "local_queue:"
	// ReportOutboxPrefix is entry A's report outbox (package outbox).
	ReportOutboxPrefix = "lease:report_outbox:"
)

// Keyspace is the handle a package keeping a table in this store's database works
// through: reads, batches and iterators of the database, held open against Close like
// every operation of the Store, and the staging of a task's end in a batch (StageTaskEnd). Point operations
// and iterator bounds are checked to lie under the prefix; a batch's keys are the caller's
// to keep there (a check per key would cost what the handle is for).
type Keyspace struct {
	s      *Store
	prefix string
}

// QueueKeyspace is the local queue's keyspace (LocalQueuePrefix).
func (s *Store) QueueKeyspace() *Keyspace { return &Keyspace{s: s, prefix: LocalQueuePrefix} }

// OutboxKeyspace is the report outbox's keyspace (ReportOutboxPrefix).
func (s *Store) OutboxKeyspace() *Keyspace { return &Keyspace{s: s, prefix: ReportOutboxPrefix} }

// Prefix is the keyspace's key prefix.
func (k *Keyspace) Prefix() string { return k.prefix }

// Acquire checks ctx and that the store is open, and holds it open until release: every
// other method must be called between the two (Pebble panics on use after close).
func (k *Keyspace) Acquire(ctx context.Context, op string) (release func(), err error) {
	return k.s.acquire(ctx, op)
}

func (k *Keyspace) check(key []byte) error {
	if !bytes.HasPrefix(key, []byte(k.prefix)) {
		return fmt.Errorf("embedded store: key %q is outside keyspace %s", key, k.prefix)
	}
	return nil
}

// Get returns a copy of the value at key; ok is false when there is none.
func (k *Keyspace) Get(key []byte) (value []byte, ok bool, err error) {
	if err := k.check(key); err != nil {
		return nil, false, err
	}
	return k.s.get(key)
}

// Set writes one key.
func (k *Keyspace) Set(key, value []byte, opts *pebble.WriteOptions) error {
	if err := k.check(key); err != nil {
		return err
	}
	return k.s.db.Set(key, value, opts)
}

// Delete deletes one key.
func (k *Keyspace) Delete(key []byte, opts *pebble.WriteOptions) error {
	if err := k.check(key); err != nil {
		return err
	}
	return k.s.db.Delete(key, opts)
}

// NewBatch returns a write-only batch of the database.
func (k *Keyspace) NewBatch() *pebble.Batch { return k.s.db.NewBatch() }

// NewIndexedBatch returns a batch that reads its own writes over the database.
func (k *Keyspace) NewIndexedBatch() *pebble.Batch { return k.s.db.NewIndexedBatch() }

// NewIter returns an iterator of the database over [lower, upper), within the keyspace:
// from the prefix to the prefix's end (keys.PrefixEnd), upper not below lower.
func (k *Keyspace) NewIter(ctx context.Context, lower, upper []byte) (*pebble.Iterator, error) {
	end := prefixEnd(k.prefix)
	if bytes.Compare(lower, []byte(k.prefix)) < 0 || bytes.Compare(upper, end) > 0 || bytes.Compare(upper, lower) < 0 {
		return nil, fmt.Errorf("embedded store: bounds [%q, %q) are outside keyspace %s", lower, upper, k.prefix)
	}
	return k.s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lower, UpperBound: upper})
}

// ApplyNoSyncWait applies b (visible when it returns) without waiting for its fsync, which
// b.SyncWait then waits for: a caller that orders the write under a lock of its own gives
// the lock back before the fsync, so that concurrent writers share one.
func (k *Keyspace) ApplyNoSyncWait(b *pebble.Batch, opts *pebble.WriteOptions) error {
	return k.s.db.ApplyNoSyncWait(b, opts)
}

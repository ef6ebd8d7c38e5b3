package localqueue

import (
	"container/heap"
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader/store/keys"
)

// requeueStale returns to pending every lease stored by a version of the queue that
// stored its leases (local_queue:leased:, records in state leased); the queue keeps its
// leases in memory now (Lease), so a data directory it wrote has none. Requires q.mu held.
func (q *Queue) requeueStale(ctx context.Context) (int, error) {
	iter, err := q.ks.NewIter(ctx, []byte(queueLeasPrefix), keys.PrefixEnd(queueLeasPrefix))
	if err != nil {
		return 0, fmt.Errorf("local queue: scan leases: %w", err)
	}
	var ids []string
	for ok := iter.First(); ok; ok = iter.Next() {
		ids = append(ids, string(iter.Key()[len(queueLeasPrefix):]))
	}
	if err := iter.Close(); err != nil {
		return 0, fmt.Errorf("local queue: scan leases: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	b := q.ks.NewBatch()
	defer b.Close()
	next := q.counts
	next.LeasedCount = len(ids) // the stored leases, about to go back
	var touched []*queueRecord
	for _, id := range ids {
		rec, ok, err := q.record(b, id)
		if err != nil {
			return 0, err
		}
		if err := b.Delete([]byte(queueLeasPrefix+id), nil); err != nil {
			return 0, fmt.Errorf("local queue: requeue %s: %w", id, err)
		}
		if !ok || rec.State != TaskLeased {
			next.LeasedCount--
			continue
		}
		// Such a lease had its pending key deleted.
		if err := b.Set(pendingKey(rec.Domain, rec.Seq), []byte(rec.TaskID), nil); err != nil {
			return 0, fmt.Errorf("local queue: requeue %s: %w", rec.TaskID, err)
		}
		if err := q.toPending(b, rec, &next); err != nil {
			return 0, err
		}
		touched = append(touched, rec)
	}
	if err := q.commit(b, next, pebble.Sync); err != nil {
		return 0, err
	}
	for _, rec := range touched {
		q.addPendingLocked(rec.Domain, rec.Seq, rec.TaskID, time.Time{})
	}
	return len(touched), nil
}

// expireLocked returns the leases that expired by now to pending. Requires q.mu held.
func (q *Queue) expireLocked(now time.Time) error {
	var back []*queueRecord
	for q.expiry.Len() > 0 && !q.expiry[0].expiresAt.After(now) {
		e := heap.Pop(&q.expiry).(leaseEntry)
		if l, ok := q.leased[e.taskID]; ok && l.expiresAt.Equal(e.expiresAt) {
			rec := *l.rec
			back = append(back, &rec)
		}
	}
	if len(back) == 0 {
		return nil
	}
	b := q.ks.NewBatch()
	defer b.Close()
	next := q.counts
	for _, rec := range back {
		if err := q.toPending(b, rec, &next); err != nil {
			return err
		}
	}
	if err := q.commit(b, next, pebble.NoSync); err != nil {
		return err
	}
	for _, rec := range back {
		delete(q.leased, rec.TaskID)
		q.addPendingLocked(rec.Domain, rec.Seq, rec.TaskID, time.Time{})
	}
	q.log.Warn("leases expired: tasks handed out again", "task_count", len(back))
	return nil
}

// toPending adds to b the record of the leased rec returned to pending, its lease
// counted (Lease keeps the task's pending key stored while it is leased).
func (q *Queue) toPending(b *pebble.Batch, rec *queueRecord, next *Counts) error {
	rec.State = TaskPending
	rec.LeaseExpiresAt = time.Time{}
	if err := q.putRecord(b, rec); err != nil {
		return err
	}
	next.LeasedCount--
	next.PendingCount++
	return nil
}

// promoteRetriesLocked moves the tasks whose backoff is over by now into the pending
// index, first of their domains. Requires q.mu held.
func (q *Queue) promoteRetriesLocked(now time.Time) error {
	if q.retries.Len() == 0 || q.retries[0].at.After(now) {
		return nil
	}
	b := q.ks.NewBatch()
	defer b.Close()
	var due []retryEntry
	for q.retries.Len() > 0 && !q.retries[0].at.After(now) {
		e := heap.Pop(&q.retries).(retryEntry)
		due = append(due, e)
	}
	var back []*queueRecord
	for _, e := range due {
		rec, ok, err := q.record(nil, e.taskID)
		if err == nil && ok && (rec.State != TaskPending || rec.NextAttemptAt.IsZero()) {
			ok = false // finished or promoted meanwhile: the entry is stale
		}
		if err == nil {
			err = b.Delete(retryKey(e.taskID), nil)
		}
		if err == nil && ok {
			rec.NextAttemptAt = time.Time{}
			err = q.putRecord(b, rec)
			if err == nil {
				err = b.Set(pendingKey(rec.Domain, rec.Seq), []byte(rec.TaskID), nil)
			}
			back = append(back, rec)
		}
		if err != nil {
			for _, e := range due {
				heap.Push(&q.retries, e)
			}
			return fmt.Errorf("local queue: promote retries: %w", err)
		}
	}
	if err := q.commit(b, q.counts, pebble.NoSync); err != nil {
		for _, e := range due {
			heap.Push(&q.retries, e)
		}
		return err
	}
	for _, rec := range back {
		q.addPendingLocked(rec.Domain, rec.Seq, rec.TaskID, time.Time{})
	}
	return nil
}

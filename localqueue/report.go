package localqueue

import (
	"container/heap"
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
)

// Report hands in a task's outcome r. The queue plays the scheduler here (SPEC §1) and
// decides by the seeds' table (retry.go): a success, a skip or a failure retrying
// cannot cure finishes the task, which is never handed out again; a failure of our own
// (has_reached_origin=false) puts it back in place; a transient failure at the origin
// puts it back after a backoff, until MaxAttemptCount attempts. Reports are delivered at
// least once: reporting a finished task does nothing, and neither does a report of a
// pending task that repeats the last one (same fetched_at) or comes while the task waits
// out a backoff (a run of a lease that expired meanwhile: the task runs again anyway). A
// report of a pending task whose lease expired is taken as if it were leased. An unknown
// task is an ENOTFOUND error.
//
// The change is committed without a sync of its own: a report comes from the outbox,
// where it is durable until the queue's change is (the outbox deletes it after).
func (q *Queue) Report(ctx context.Context, r *downloader.Report) error {
	return q.commitEnd(ctx, &downloader.TaskEnd{Report: r}, false)
}

// CommitTask commits a task's end in one synchronous batch: its page and fetch_result
// (embedded.Keyspace.StageTaskEnd) and the queue's change for its report, as Report
// decides it. It returns once the batch is durable, so that the report needs no outbox:
// the queue has it. Concurrent commits share one fsync: the queue's lock is held while
// the batch is applied, not across the fsync. A report of an unknown task is an ENOTFOUND
// error returned after the page and the result are committed. It satisfies
// downloader.TaskCommitter (lease.Config.Committer).
func (q *Queue) CommitTask(ctx context.Context, end *downloader.TaskEnd) error {
	return q.commitEnd(ctx, end, true)
}

// commitEnd stages end's page and result, then the queue's change for its report, in one
// batch, and commits it: synchronously when isSync, else without a sync of its own.
func (q *Queue) commitEnd(ctx context.Context, end *downloader.TaskEnd, isSync bool) error {
	r := end.Report
	if r == nil || r.TaskID == "" {
		return downloader.Invalidf("task_id", "a report needs a task_id")
	}
	release, err := q.ks.Acquire(ctx, "report task")
	if err != nil {
		return err
	}
	defer release()
	b := q.ks.NewBatch()
	defer b.Close()
	// Staged before the queue's lock is taken: staging a page may wait for another
	// task's commit of the same body.
	done, err := q.ks.StageTaskEnd(ctx, b, end)
	if err != nil {
		return fmt.Errorf("local queue: report %s: %w", r.TaskID, err)
	}
	q.mu.Lock()
	apply, next, reportErr := q.reportLocked(b, r)
	if reportErr != nil && downloader.ErrorCode(reportErr) != downloader.ENOTFOUND {
		q.mu.Unlock()
		done(reportErr)
		return reportErr
	}
	if b.Empty() {
		q.mu.Unlock()
		done(nil)
		return reportErr
	}
	if isSync {
		err = q.ks.ApplyNoSyncWait(b, pebble.Sync)
	} else {
		err = b.Commit(pebble.NoSync)
	}
	if err == nil && apply != nil {
		// The change is visible now, before its fsync: whatever depends on it (a lease of
		// a task put back in place) is written after it in the write-ahead log, so it
		// cannot outlive it in a crash.
		q.counts = next
		apply()
	}
	q.mu.Unlock()
	if err == nil && isSync {
		err = b.SyncWait()
	}
	done(err)
	if err != nil {
		return fmt.Errorf("local queue: commit: %w", err)
	}
	return reportErr
}

// reportLocked adds to b the queue's change for the report r (see Report) and returns
// the change to make in memory once b is committed (nil: nothing changes) and the counts
// after it. Requires q.mu held.
func (q *Queue) reportLocked(b *pebble.Batch, r *downloader.Report) (apply func(), next Counts, err error) {
	var rec *queueRecord
	if l, ok := q.leased[r.TaskID]; ok {
		// Leased by this process: the record is as Lease wrote it (every change to a leased
		// record ends its entry here), so it is not read back and decoded.
		c := *l.rec
		rec = &c
	} else {
		var ok bool
		if rec, ok, err = q.record(b, r.TaskID); err != nil {
			return nil, next, err
		} else if !ok {
			return nil, next, downloader.Errorf(downloader.ENOTFOUND, "task %q is not in the local queue", r.TaskID)
		}
	}
	switch {
	case rec.State == TaskDone || rec.State == TaskSkipped:
		return nil, next, nil
	case rec.State == TaskPending && !rec.NextAttemptAt.IsZero():
		return nil, next, nil
	case rec.State == TaskPending && rec.Report != nil && rec.Report.FetchedAt.Equal(r.FetchedAt):
		return nil, next, nil
	}
	now := q.clk.Now()
	next = q.counts // shares the failed counts' map: finishRecord copies it before a change
	prev := rec.State
	// A leased task's pending key is stored, as is a pending one's (Lease writes nothing):
	// it goes unless the task stays pending in place, where it stays as it is.
	switch prev {
	case TaskLeased:
		next.LeasedCount--
	case TaskPending:
		next.PendingCount--
	}
	rep := *r
	rec.Report = &rep
	rec.LeaseExpiresAt = time.Time{}
	d := q.decideLocked(rec, r, now)
	if d.action != actionRetryInPlace {
		if err := b.Delete(pendingKey(rec.Domain, rec.Seq), nil); err != nil {
			return nil, next, fmt.Errorf("local queue: report: %w", err)
		}
	}
	switch d.action {
	case actionFinish:
		finishRecord(rec, r, &next)
	case actionRetryInPlace:
		rec.State = TaskPending
		next.PendingCount++
		next.RetryCount++
	case actionRetryLater:
		rec.State = TaskPending
		rec.NextAttemptAt = d.at.UTC()
		if err := b.Set(retryKey(rec.TaskID), retryValue(d.at, rec.Domain), nil); err != nil {
			return nil, next, fmt.Errorf("local queue: report: %w", err)
		}
		next.PendingCount++
		next.RetryCount++
	}
	if err := q.putRecord(b, rec); err != nil {
		return nil, next, err
	}
	if err := q.putCounts(b, &next); err != nil {
		return nil, next, err
	}
	return func() { q.reportedLocked(rec, prev, d) }, next, nil
}

// reportedLocked makes in memory the change a committed report made (reportLocked): rec
// is no longer leased, and is pending again as d decided. Requires q.mu held.
func (q *Queue) reportedLocked(rec *queueRecord, prev string, d retryDecision) {
	delete(q.leased, rec.TaskID)
	if prev == TaskPending {
		// A report of a task back in pending (its lease expired meanwhile): rare, so
		// finding it in its domain's tasks is a scan of that domain.
		if dm := q.domains[rec.Domain]; dm != nil && dm.tasks.remove(rec.Seq) {
			delete(q.otherIDs, rec.Seq)
			q.dropIfEmptyLocked(dm)
		}
	}
	if !d.hold.IsZero() {
		q.holdLocked(rec.Domain, d.hold)
	}
	switch d.action {
	case actionRetryInPlace:
		q.addPendingLocked(rec.Domain, rec.Seq, rec.TaskID, time.Time{})
	case actionRetryLater:
		heap.Push(&q.retries, retryEntry{taskID: rec.TaskID, domain: rec.Domain, at: d.at})
	}
	if d.action != actionFinish {
		q.log.Debug("task retried", "task_id", rec.TaskID, "url", rec.URL, "attempt_count", rec.AttemptCount,
			"own_failure_count", rec.OwnFailureCount, "next_attempt_at", rec.NextAttemptAt)
	}
}

// finishRecord marks rec finished with r and counts it into next. next's failed counts'
// map may be the one in memory (q.counts), which must not change before the batch is
// committed: a failure is counted into a copy, made only then (most tasks succeed, and a
// copy per task was an allocation on every commit of a task's end).
func finishRecord(rec *queueRecord, r *downloader.Report, next *Counts) {
	if r.SkipReason != "" {
		rec.State = TaskSkipped
		next.SkippedCount++
		return
	}
	rec.State = TaskDone
	next.DoneCount++
	if r.FailReason != nil && *r.FailReason != "" {
		*next = next.clone()
		next.FailedCount[*r.FailReason]++
	} else {
		next.SucceededCount++
	}
	if r.PageKey != "" {
		next.PageCount++
	}
}

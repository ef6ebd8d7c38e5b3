package localqueue

import (
	"context"
	"fmt"
	"time"

	"downloader"
	"downloader/store/embedded"
	"downloader/store/keys"
)

// Listing bounds of ListTasks.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// maxListScan bounds the records one ListTasks call reads when it filters by state,
	// so that a request for a rare state costs a bounded time; the cursor then says
	// where to go on, possibly after an empty page.
	maxListScan = 20_000
)

// ListTasks lists the queue's tasks in task id order (submission order for the ids the
// queue assigns), those in state only when state is not empty, from an opaque cursor
// returned by a previous call ("" for the first page), up to limit (DefaultListLimit when
// 0, at most MaxListLimit). The returned cursor is "" after the last page. A page may
// hold fewer than limit tasks, even none, and still have a cursor: the scan of one call
// is bounded.
func (q *Queue) ListTasks(ctx context.Context, state downloader.TaskState, cursor string, limit int) ([]downloader.TaskStatus, string, error) {
	if state != "" && !state.IsValid() {
		return nil, "", downloader.Invalidf("state", "state must be one of queued, leased, done, failed, skipped")
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	release, err := q.ks.Acquire(ctx, "list tasks")
	if err != nil {
		return nil, "", err
	}
	defer release()
	// The cursor is the id of the first task not listed yet.
	lower := []byte(queueTaskPrefix + cursor)
	iter, err := q.ks.NewIter(ctx, lower, keys.PrefixEnd(queueTaskPrefix))
	if err != nil {
		return nil, "", fmt.Errorf("local queue: list tasks: %w", err)
	}
	defer iter.Close()
	out := []downloader.TaskStatus{}
	scanned := 0
	for ok := iter.First(); ok; ok = iter.Next() {
		id := string(iter.Key()[len(queueTaskPrefix):])
		if len(out) == limit || scanned == maxListScan {
			return out, id, nil
		}
		scanned++
		v, err := iter.ValueAndErr()
		if err != nil {
			return nil, "", fmt.Errorf("local queue: list tasks: %w", err)
		}
		var rec queueRecord
		if err := decodeQueueRecord(v, &rec); err != nil {
			return nil, "", fmt.Errorf("local queue: decode task %s: %w", id, err)
		}
		st := q.live(&rec).taskRecord().TaskStatus()
		if state == "" || st.State == state {
			out = append(out, st)
		}
	}
	if err := iter.Error(); err != nil {
		return nil, "", fmt.Errorf("local queue: list tasks: %w", err)
	}
	return out, "", nil
}

// TaskStatus returns one task as the task status API shows it, or an ENOTFOUND error.
func (q *Queue) TaskStatus(ctx context.Context, taskID string) (*downloader.TaskStatus, error) {
	rec, err := q.Task(ctx, taskID)
	if err != nil {
		return nil, err
	}
	st := rec.TaskStatus()
	return &st, nil
}

// RangeTasks calls f for every task of the local queue kept in s, in task id order, until
// f returns false. It needs no open Queue and changes nothing, so that an export can read
// a data directory the queue of which is not running; it reads the whole queue.
func RangeTasks(ctx context.Context, s *embedded.Store, f func(r *TaskRecord) bool) error {
	return rangeRecords(ctx, s.QueueKeyspace(), func(rec *queueRecord) bool { return f(rec.taskRecord()) })
}

// rangeRecords calls f for every task record of the local queue kept in s, in task id
// order, until f returns false.
func rangeRecords(ctx context.Context, ks *embedded.Keyspace, f func(rec *queueRecord) bool) error {
	release, err := ks.Acquire(ctx, "list tasks")
	if err != nil {
		return err
	}
	defer release()
	iter, err := ks.NewIter(ctx, []byte(queueTaskPrefix), keys.PrefixEnd(queueTaskPrefix))
	if err != nil {
		return fmt.Errorf("local queue: list tasks: %w", err)
	}
	defer iter.Close()
	for ok := iter.First(); ok; ok = iter.Next() {
		v, err := iter.ValueAndErr()
		if err != nil {
			return fmt.Errorf("local queue: list tasks: %w", err)
		}
		var rec queueRecord
		if err := decodeQueueRecord(v, &rec); err != nil {
			return fmt.Errorf("local queue: decode task at %q: %w", iter.Key(), err)
		}
		if !f(&rec) {
			return nil
		}
	}
	return iter.Error()
}

// Counts returns the queue's counts.
func (q *Queue) Counts() Counts {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.counts.clone()
}

// TaskRecord is a task as the queue keeps it.
type TaskRecord struct {
	downloader.Task
	State       string             `json:"state"` // as stored: TaskPending, ...; Status for the API
	SubmittedAt time.Time          `json:"submitted_at"`
	LeaseCount  int                `json:"lease_count"`      // queueRecord.LeaseCount
	Report      *downloader.Report `json:"report,omitempty"` // the last report
	// AttemptCount counts the attempts that reached the origin; OwnFailureCount the
	// failures of our own that were retried in place.
	AttemptCount    int       `json:"attempt_count"`
	OwnFailureCount int       `json:"own_failure_count"`
	NextAttemptAt   time.Time `json:"next_attempt_at,omitzero"` // while waiting out a backoff
	Depth           int       `json:"depth,omitempty"`          // links from a seed (queueRecord.Depth)
}

// Status is the record's state as the task status API names it.
func (r *TaskRecord) Status() downloader.TaskState {
	switch r.State {
	case TaskLeased:
		return downloader.TaskLeased
	case TaskSkipped:
		return downloader.TaskSkipped
	case TaskDone:
		if r.Report != nil && r.Report.FailReason != nil && *r.Report.FailReason != "" {
			return downloader.TaskFailed
		}
		return downloader.TaskDone
	}
	return downloader.TaskQueued
}

// TaskStatus is the record as the task status API shows it.
func (r *TaskRecord) TaskStatus() downloader.TaskStatus {
	st := downloader.TaskStatus{TaskID: r.TaskID, URL: r.URL, Domain: r.Domain, MinIntervalMs: r.MinIntervalMs,
		ShouldRender: r.ShouldRender, ShouldStore: r.ShouldStore, State: r.Status(),
		AttemptCount: r.AttemptCount, OwnFailureCount: r.OwnFailureCount, SubmittedAt: r.SubmittedAt.UTC()}
	if rep := r.Report; rep != nil {
		st.FailReason, st.HTTPStatus, st.PageKey = rep.FailReason, rep.HTTPStatus, rep.PageKey
		if rep.SkipReason != "" {
			sr := rep.SkipReason
			st.SkipReason = &sr
		} else {
			has := rep.HasReachedOrigin
			st.HasReachedOrigin = &has
		}
		at := rep.FetchedAt.UTC()
		st.FetchedAt = &at
	}
	if !r.NextAttemptAt.IsZero() {
		at := r.NextAttemptAt.UTC()
		st.NextAttemptAt = &at
	}
	if r.State == TaskLeased && !r.LeaseExpiresAt.IsZero() {
		at := r.LeaseExpiresAt.UTC()
		st.LeaseExpiresAt = &at
	}
	return st
}

func (rec *queueRecord) taskRecord() *TaskRecord {
	return &TaskRecord{Task: rec.Task, State: rec.State, SubmittedAt: rec.SubmittedAt, LeaseCount: rec.LeaseCount,
		Report: rec.Report, AttemptCount: rec.AttemptCount, OwnFailureCount: rec.OwnFailureCount, NextAttemptAt: rec.NextAttemptAt, Depth: rec.Depth}
}

// Task returns one task's record, or an ENOTFOUND error.
func (q *Queue) Task(ctx context.Context, taskID string) (*TaskRecord, error) {
	release, err := q.ks.Acquire(ctx, "get task")
	if err != nil {
		return nil, err
	}
	defer release()
	rec, ok, err := q.record(nil, taskID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, downloader.Errorf(downloader.ENOTFOUND, "task %q is not in the local queue", taskID)
	}
	return q.live(rec).taskRecord(), nil
}

// live returns the task as it is now: its lease's record while this process holds a
// lease of it (Lease stores nothing, so the stored record still says pending), else
// stored, the record read. The lease's record is copied under q.mu.
func (q *Queue) live(stored *queueRecord) *queueRecord {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l, ok := q.leased[stored.TaskID]; ok {
		rec := *l.rec
		return &rec
	}
	return stored
}

// RangeDone calls f for every finished task's report (done or skipped), in task id order,
// until f returns false. It reads the whole queue; use it for summaries, not per request.
func (q *Queue) RangeDone(ctx context.Context, f func(t *downloader.Task, r *downloader.Report) bool) error {
	return rangeRecords(ctx, q.ks, func(rec *queueRecord) bool {
		return !(rec.State == TaskDone || rec.State == TaskSkipped) || rec.Report == nil || f(&rec.Task, rec.Report)
	})
}

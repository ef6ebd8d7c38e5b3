package localqueue

import (
	"context"
	"fmt"

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
		st := rec.taskRecord().TaskStatus()
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

package localqueue

import (
	"container/heap"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/clock"
	"downloader/store/embedded"
)

// Queue defaults.
const (
	DefaultLeaseDuration = 10 * time.Minute
	DefaultLookahead     = 500 * time.Millisecond
	// MaxSubmitCount bounds one Submit call.
	MaxSubmitCount = 10_000
	// DefaultFreshRecordCount bounds the records of new tasks kept in memory for their
	// first lease (Queue.fresh): about 2.5 MiB at a few hundred bytes a record.
	DefaultFreshRecordCount = 8192
)

// Task states, as stored. A pending task may be waiting out a retry backoff
// (next_attempt_at set); a done task succeeded or failed for good; a skipped task was
// never fetched on purpose (robots.txt). TaskRecord.Status gives the API's names.
const (
	TaskPending = "pending"
	TaskLeased  = "leased"
	TaskDone    = "done"
	TaskSkipped = "skipped"
)

// Config configures a Queue. Zero values take the defaults.
type Config struct {
	Clock  clock.Clock
	Logger *slog.Logger
	// LeaseDuration is how long a lease lasts before the task is handed out again.
	LeaseDuration time.Duration
	// Lookahead is how long before a domain's next task is due the queue hands it out.
	Lookahead time.Duration
	// DefaultMinInterval is given to submitted tasks that carry no min_interval_ms.
	DefaultMinInterval time.Duration
	// HeaderPolicy decides which request_headers a submitted task may carry.
	HeaderPolicy downloader.HeaderPolicy
	// CheckURLHost is the SSRF guard's literal-address check, the one entries B and C
	// apply (netguard's Guard.CheckURLHost): a task whose URL it refuses is not queued
	// (Queue.CheckTask). nil: no such check.
	CheckURLHost func(host string) error

	// Retries (retry.go), the scheduler's table in seed 002. MaxAttemptCount bounds
	// the attempts that reached the origin (default 3; 1 turns retries off);
	// RetryBaseDelay and RetryMaxDelay bound the backoff between them (default 2 s and
	// 10 min); MaxOwnFailureCount bounds the in-place retries of failures of our own
	// (has_reached_origin=false, default 10), so that a crawl with a missing browser still
	// ends. Jitter returns a number in [0, 1) (default math/rand/v2's Float64); tests fix it.
	MaxAttemptCount    int
	RetryBaseDelay     time.Duration
	RetryMaxDelay      time.Duration
	MaxOwnFailureCount int
	Jitter             func() float64

	// FreshRecordCount bounds the records of tasks submitted by this process kept in
	// memory until their first lease, which then need not read them back (default
	// DefaultFreshRecordCount; negative: none).
	FreshRecordCount int
}

// SubmitResult is what Submit did with one task.
type SubmitResult struct {
	TaskID      string `json:"task_id"`
	URL         string `json:"url"`
	IsDuplicate bool   `json:"is_duplicate"` // the URL was queued before: nothing was added
	State       string `json:"state"`        // the task's state as GET /v1/tasks/{task_id} names it
}

// Queue is the embedded local queue over a Store. Create it with Open, at most one per
// Store. It satisfies the lease loop's Source. Safe for concurrent use; it stops working
// (EUNAVAILABLE) when its Store is closed.
type Queue struct {
	ks  *embedded.Keyspace
	clk clock.Clock
	log *slog.Logger
	cfg Config

	// mu guards everything below and orders the queue's writes: every change is one batch
	// committed under it, so the stored counts always match the stored records.
	mu      sync.Mutex
	seq     uint64
	counts  Counts
	domains map[string]*queueDomain
	ready   domainHeap // domains with pending tasks, earliest due first
	// otherIDs: pending task seq → its id, for the tasks whose id is not their seq's own
	// form (defaultTaskID); the others keep no id in memory.
	otherIDs map[uint64]string
	expiry   leaseHeap            // this process's leases, earliest expiry first
	leased   map[string]liveLease // task id → its live lease
	// fresh: task id → its record as Submit committed it, for at most FreshRecordCount
	// pending tasks, so that their lease hands them out without a point read. putRecord
	// drops a task's entry whenever it writes the record again, so an entry is always the
	// stored record; Lease takes the entry out. Memory only: empty after a restart.
	fresh map[string]*queueRecord

	retries retryHeap // tasks waiting out a backoff, earliest first
	// holds: domain → no task before then (the origin's Retry-After); floors: domain →
	// the least spacing of its tasks (robots.txt Crawl-delay). Both in memory only, one
	// entry per domain that has one: a restart forgets them (robots.txt is read again).
	holds     map[string]time.Time
	floors    map[string]time.Duration
	pushbacks pushbacks // the domains' pushback curve (pushback.go)

	// recordBufs holds buffers for encoding task records (a batch copies what it is
	// given): one record is written per Submit, Lease and Report.
	recordBufs sync.Pool
}

// Open opens the queue kept in s: it rebuilds the in-memory index of pending tasks by
// domain and returns every lease left by a previous process to pending.
func Open(ctx context.Context, s *embedded.Store, cfg Config) (*Queue, error) {
	ks := s.QueueKeyspace()
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.Lookahead <= 0 {
		cfg.Lookahead = DefaultLookahead
	}
	cfg.retryDefaults()
	if cfg.FreshRecordCount == 0 {
		cfg.FreshRecordCount = DefaultFreshRecordCount
	}
	q := &Queue{ks: ks, clk: cfg.Clock, log: cfg.Logger.With("component", "local_queue"), cfg: cfg,
		domains: map[string]*queueDomain{}, leased: map[string]liveLease{}, otherIDs: map[uint64]string{},
		fresh: map[string]*queueRecord{},
		holds: map[string]time.Time{}, floors: map[string]time.Duration{},
		counts: Counts{FailedCount: map[downloader.FailReason]int{}}}
	release, err := ks.Acquire(ctx, "open queue")
	if err != nil {
		return nil, err
	}
	defer release()
	q.mu.Lock()
	defer q.mu.Unlock()
	if v, ok, err := ks.Get([]byte(queueSeqKey)); err != nil {
		return nil, err
	} else if ok && len(v) == 8 {
		q.seq = binary.BigEndian.Uint64(v)
	}
	if v, ok, err := ks.Get([]byte(queueCountsKey)); err != nil {
		return nil, err
	} else if ok {
		if err := json.Unmarshal(v, &q.counts); err != nil {
			return nil, fmt.Errorf("local queue: decode counts: %w", err)
		}
		if q.counts.FailedCount == nil {
			q.counts.FailedCount = map[downloader.FailReason]int{}
		}
	}
	// Not stored (a directory written before may hold them, stale): counted from the
	// indexes, the pending below, the leased by requeueStale.
	q.counts.PendingCount, q.counts.LeasedCount = 0, 0
	if err := q.loadPending(ctx); err != nil {
		return nil, err
	}
	if err := q.loadRetries(ctx); err != nil {
		return nil, err
	}
	q.counts.PendingCount += len(q.retries)
	n, err := q.requeueStale(ctx)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		q.log.Info("leases of the previous run returned to pending", "task_count", n)
	}
	return q, nil
}

// Submit queues tasks (at most MaxSubmitCount). Every task is checked first (CheckTask); if
// one is invalid nothing is queued and the error names the field. A URL queued before is
// not queued again (its result says is_duplicate). It returns once the new tasks are
// durable.
func (q *Queue) Submit(ctx context.Context, tasks []downloader.Task) ([]SubmitResult, error) {
	return q.SubmitAtDepth(ctx, tasks, 0)
}

// SubmitAtDepth is Submit for tasks found depth links away from a seed (discover): the
// new ones keep their depth in their record (TaskRecord.Depth); a duplicate keeps the
// depth it was first queued with.
func (q *Queue) SubmitAtDepth(ctx context.Context, tasks []downloader.Task, depth int) ([]SubmitResult, error) {
	if len(tasks) > MaxSubmitCount {
		return nil, downloader.Invalidf("tasks", "at most %d tasks at once", MaxSubmitCount)
	}
	checked := make([]downloader.Task, len(tasks))
	for i, t := range tasks {
		c, err := q.CheckTask(t)
		if err != nil {
			return nil, err
		}
		checked[i] = c
	}
	release, err := q.ks.Acquire(ctx, "submit tasks")
	if err != nil {
		return nil, err
	}
	defer release()
	q.mu.Lock()
	defer q.mu.Unlock()

	b := q.ks.NewIndexedBatch()
	defer b.Close()
	now := q.clk.Now().UTC()
	next := q.counts
	seq := q.seq
	out := make([]SubmitResult, len(checked))
	type put struct {
		domain, id string
		seq        uint64
		rec        *queueRecord
	}
	var added []put
	for i := range checked {
		t := &checked[i]
		urlKey := queueURLKey(t.URL)
		if id, ok, err := batchGet(b, urlKey); err != nil {
			return nil, err
		} else if ok {
			res := SubmitResult{TaskID: string(id), URL: t.URL, IsDuplicate: true}
			if l, ok := q.leased[string(id)]; ok {
				res.State = string(l.rec.taskRecord().Status())
			} else if rec, ok, err := q.record(b, string(id)); err != nil {
				return nil, err
			} else if ok {
				res.State = string(rec.taskRecord().Status())
			}
			out[i] = res
			continue
		}
		seq++
		if t.TaskID == "" {
			t.TaskID = defaultTaskID(seq)
		}
		if _, ok, err := batchGet(b, []byte(queueTaskPrefix+t.TaskID)); err != nil {
			return nil, err
		} else if ok {
			return nil, downloader.Invalidf("task_id", "task_id %q is already used by another URL", t.TaskID)
		}
		rec := &queueRecord{Task: *t, Seq: seq, State: TaskPending, SubmittedAt: now, Depth: max(depth, 0)}
		if err := q.putRecord(b, rec); err != nil {
			return nil, err
		}
		if err := b.Set(pendingKey(t.Domain, seq), []byte(t.TaskID), nil); err != nil {
			return nil, fmt.Errorf("local queue: submit: %w", err)
		}
		if err := b.Set(urlKey, []byte(t.TaskID), nil); err != nil {
			return nil, fmt.Errorf("local queue: submit: %w", err)
		}
		next.PendingCount++
		added = append(added, put{t.Domain, t.TaskID, seq, rec})
		out[i] = SubmitResult{TaskID: t.TaskID, URL: t.URL, State: string(downloader.TaskQueued)}
	}
	if len(added) == 0 {
		return out, nil
	}
	var seqBuf [8]byte
	binary.BigEndian.PutUint64(seqBuf[:], seq)
	if err := b.Set([]byte(queueSeqKey), seqBuf[:], nil); err != nil {
		return nil, fmt.Errorf("local queue: submit: %w", err)
	}
	if err := q.commit(b, next, pebble.Sync); err != nil {
		return nil, err
	}
	q.seq = seq
	for _, a := range added {
		q.addPendingLocked(a.domain, a.seq, a.id, time.Time{})
		if len(q.fresh) < q.cfg.FreshRecordCount {
			q.fresh[a.id] = a.rec
		}
	}
	return out, nil
}

// Lease hands out up to maxTaskCount tasks whose domains are due within the lookahead,
// earliest due first, each with a lease of LeaseDuration. Leases that expired are
// returned to pending first. workerID is recorded in the log only.
//
// A lease is kept in memory only (q.leased): nothing is written, and the stored record
// and pending key stay as they were, so that a crash, which voids every lease of this
// process (one process opens the data directory), leaves the task pending with nothing
// to undo on open. The lease's record is written when the lease ends: in the task's end
// (CommitTask, Report), at Release or at its expiry, each with the lease counted.
func (q *Queue) Lease(ctx context.Context, workerID string, maxTaskCount int) ([]downloader.Task, error) {
	if maxTaskCount <= 0 {
		return nil, nil
	}
	release, err := q.ks.Acquire(ctx, "lease tasks")
	if err != nil {
		return nil, err
	}
	defer release()
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clk.Now()
	if err := q.expireLocked(now); err != nil {
		return nil, err
	}
	if err := q.promoteRetriesLocked(now); err != nil {
		return nil, err
	}
	horizon := now.Add(q.cfg.Lookahead)
	if q.ready.Len() == 0 || q.ready[0].nextAt.After(horizon) {
		return nil, nil
	}

	// stale: the pending keys of index entries whose record is not pending, dropped
	// below; the only writes of a lease call, and rare.
	var stale *pebble.Batch
	defer func() {
		if stale != nil {
			stale.Close()
		}
	}()
	next := q.counts // Lease changes only the pending and leased counts, not the map
	expires := now.Add(q.cfg.LeaseDuration).UTC()
	// The index is changed as tasks are picked; undo puts it back if a read fails.
	type undo struct {
		d      *queueDomain
		seq    uint64
		nextAt time.Time
	}
	var (
		out   []downloader.Task
		recs  []*queueRecord
		undos []undo
	)
	rollback := func() {
		for i := len(undos) - 1; i >= 0; i-- {
			u := undos[i]
			u.d.tasks.push(u.seq)
			u.d.nextAt = u.nextAt
			q.domains[u.d.name] = u.d
			if u.d.index < 0 {
				heap.Push(&q.ready, u.d)
			} else {
				heap.Fix(&q.ready, u.d.index)
			}
		}
	}
	for len(out) < maxTaskCount && q.ready.Len() > 0 && !q.ready[0].nextAt.After(horizon) {
		d := q.ready[0]
		seq := d.tasks.pop()
		undos = append(undos, undo{d: d, seq: seq, nextAt: d.nextAt})
		id := q.taskIDLocked(seq)
		rec, ok := q.fresh[id]
		var err error
		if ok {
			delete(q.fresh, id) // leased now, or dropped below: the lease holds the record
		} else {
			rec, ok, err = q.record(nil, id)
		}
		if err == nil && !ok {
			err = fmt.Errorf("local queue: pending task %s has no record", id)
		}
		if err != nil {
			rollback()
			return nil, err
		}
		if rec.State != TaskPending || !rec.NextAttemptAt.IsZero() {
			// The index said pending, the record says otherwise: the record is the truth.
			// Drop the entry (its key too) and hand nothing out for it.
			q.log.Warn("pending index entry of a task not pending dropped", "task_id", id, "state", rec.State)
			if stale == nil {
				stale = q.ks.NewBatch()
			}
			if err := stale.Delete(pendingKey(d.name, seq), nil); err != nil {
				rollback()
				return nil, fmt.Errorf("local queue: lease: %w", err)
			}
			next.PendingCount--
			q.dropIfEmptyLocked(d)
			continue
		}
		rec.State = TaskLeased
		rec.LeaseExpiresAt = expires
		rec.LeaseCount++
		next.PendingCount--
		next.LeasedCount++
		due := d.nextAt
		if due.Before(now) {
			due = now
		}
		d.nextAt = due.Add(max(time.Duration(*rec.MinIntervalMs)*time.Millisecond, q.floors[d.name]))
		q.dropIfEmptyLocked(d)
		t := rec.Task
		t.IsPaced = true // handed out at its domain's slot (less Lookahead): see Task.IsPaced
		out = append(out, t)
		recs = append(recs, rec)
	}
	if len(undos) == 0 {
		return nil, nil
	}
	if stale != nil {
		if err := q.commit(stale, next, pebble.NoSync); err != nil {
			rollback()
			return nil, err
		}
	}
	q.counts = next
	for _, u := range undos {
		delete(q.otherIDs, u.seq) // out of the pending index (handed out or dropped)
	}
	for _, rec := range recs {
		q.leased[rec.TaskID] = liveLease{expiresAt: expires, rec: rec}
		heap.Push(&q.expiry, leaseEntry{taskID: rec.TaskID, expiresAt: expires})
	}
	q.log.Debug("leased", "worker_id", workerID, "task_count", len(out))
	return out, nil
}

// Release hands a leased task back: it is pending again, first of its domain, and the
// domain is not due before retryAfter from now. Releasing a task that is not leased (done,
// or already back to pending) does nothing; an unknown task is an ENOTFOUND error.
func (q *Queue) Release(ctx context.Context, taskID string, retryAfter time.Duration) error {
	release, err := q.ks.Acquire(ctx, "release task")
	if err != nil {
		return err
	}
	defer release()
	q.mu.Lock()
	defer q.mu.Unlock()
	l, ok := q.leased[taskID]
	if !ok {
		if _, ok, err := q.record(nil, taskID); err != nil {
			return err
		} else if !ok {
			return downloader.Errorf(downloader.ENOTFOUND, "task %q is not in the local queue", taskID)
		}
		return nil
	}
	b := q.ks.NewBatch()
	defer b.Close()
	next := q.counts
	rec := *l.rec
	if err := q.toPending(b, &rec, &next); err != nil {
		return err
	}
	if err := q.commit(b, next, pebble.NoSync); err != nil {
		return err
	}
	delete(q.leased, taskID)
	q.addPendingLocked(rec.Domain, rec.Seq, rec.TaskID, q.clk.Now().Add(max(retryAfter, 0)))
	return nil
}

// SetCrawlDelay makes the queue hand out domain's tasks at least d apart (robots.txt
// Crawl-delay, learned by the crawl's robots gate): the queue plays the sampler here,
// whose interval is max(crawl_delay, the default). The tasks' own min_interval_ms is
// raised to it by the gate when they run; this keeps them from being leased only to wait.
// Kept in memory, one entry per domain; d <= 0 removes it.
func (q *Queue) SetCrawlDelay(domain string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if d <= 0 {
		delete(q.floors, domain)
		return
	}
	q.floors[domain] = min(d, downloader.MaxMinInterval)
}

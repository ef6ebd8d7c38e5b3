package localqueue

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/clock"
	"downloader/discover"
	"downloader/store/embedded"
	"downloader/store/keys"
)

// The keys of the layout in the package comment (doc.go).
const (
	queueSeqKey     = embedded.LocalQueuePrefix + "meta:seq"
	queueCountsKey  = embedded.LocalQueuePrefix + "meta:counts"
	queueTaskPrefix = embedded.LocalQueuePrefix + "task:"
	queuePendPrefix = embedded.LocalQueuePrefix + "pending:"
	queueLeasPrefix = embedded.LocalQueuePrefix + "leased:"
	queueURLPrefix  = embedded.LocalQueuePrefix + "url:"
	queueRetrPrefix = embedded.LocalQueuePrefix + "retry:"
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

// Counts counts the queue's tasks by state, and the finished ones by outcome.
type Counts struct {
	PendingCount   int `json:"pending_count"` // including those waiting out a retry backoff
	LeasedCount    int `json:"leased_count"`
	DoneCount      int `json:"done_count"` // finished by a fetch, successfully or not
	SucceededCount int `json:"succeeded_count"`
	// SkippedCount counts the tasks finished without a fetch, on purpose (robots.txt).
	SkippedCount int `json:"skipped_count"`
	// RetryCount counts the retries the queue scheduled (in place or after a backoff).
	RetryCount int `json:"retry_count"`
	// FailedCount counts the finished tasks by fail_reason.
	FailedCount map[downloader.FailReason]int `json:"failed_count"`
	// PageCount counts the finished tasks whose page was stored (several tasks may share
	// one deduplicated page).
	PageCount int `json:"page_count"`
}

// TotalCount is every task ever queued.
func (c Counts) TotalCount() int {
	return c.PendingCount + c.LeasedCount + c.DoneCount + c.SkippedCount
}

// FinishedCount is every task that will not run again: done or skipped.
func (c Counts) FinishedCount() int { return c.DoneCount + c.SkippedCount }

// OwnFailureCount counts the finished tasks that failed for the downloader's own reasons
// (has_reached_origin=false).
func (c Counts) OwnFailureCount() int {
	n := 0
	for r, k := range c.FailedCount {
		if !r.HasReachedOrigin() {
			n += k
		}
	}
	return n
}

func (c Counts) clone() Counts {
	m := make(map[downloader.FailReason]int, len(c.FailedCount))
	for k, v := range c.FailedCount {
		m[k] = v
	}
	c.FailedCount = m
	return c
}

// SubmitResult is what Submit did with one task.
type SubmitResult struct {
	TaskID      string `json:"task_id"`
	URL         string `json:"url"`
	IsDuplicate bool   `json:"is_duplicate"` // the URL was queued before: nothing was added
	State       string `json:"state"`        // the task's state as GET /v1/tasks/{task_id} names it
}

// queueRecord is the stored form of one task.
type queueRecord struct {
	downloader.Task
	Seq         uint64             `json:"seq"`
	State       string             `json:"state"`
	SubmittedAt time.Time          `json:"submitted_at"`
	LeaseCount  int                `json:"lease_count"`
	Report      *downloader.Report `json:"report,omitempty"` // the last one
	// AttemptCount counts the attempts that reached the origin; OwnFailureCount the
	// failures of our own retried in place (not attempts, seed 002).
	AttemptCount    int `json:"attempt_count"`
	OwnFailureCount int `json:"own_failure_count"`
	// NextAttemptAt is set while the pending task waits out a retry backoff.
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	// Depth is how many links away from a seed a discovered task was found (0: a seed,
	// or any task of a list crawl; records written before it read as 0).
	Depth int `json:"depth,omitempty"`
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

// liveLease is a lease this process handed out: its expiry and the task record as Lease
// stored it, which Report uses instead of reading it back. Only leased tasks (at most the
// lease loop's held count) keep one.
type liveLease struct {
	expiresAt time.Time
	rec       *queueRecord
}

// queueDomain is one domain with pending tasks.
type queueDomain struct {
	name   string
	tasks  pendingHeap // its pending tasks, first submitted first
	nextAt time.Time   // when its next task is due (the previous one's due time + interval)
	index  int         // in ready
}

// pending counts the domain's pending tasks.
func (d *queueDomain) pending() int { return len(d.tasks) }

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

// loadPending rebuilds the in-memory index from the pending index keys. Requires q.mu held.
func (q *Queue) loadPending(ctx context.Context) error {
	iter, err := q.ks.NewIter(ctx, []byte(queuePendPrefix), keys.PrefixEnd(queuePendPrefix))
	if err != nil {
		return fmt.Errorf("local queue: scan pending: %w", err)
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		k := string(iter.Key()[len(queuePendPrefix):])
		i := strings.LastIndexByte(k, ':')
		if i < 0 {
			_ = iter.Close()
			return fmt.Errorf("local queue: unexpected key %q", iter.Key())
		}
		seq, err := strconv.ParseUint(k[i+1:], 16, 64)
		if err != nil {
			_ = iter.Close()
			return fmt.Errorf("local queue: unexpected key %q", iter.Key())
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			_ = iter.Close()
			return fmt.Errorf("local queue: scan pending: %w", err)
		}
		d := q.domainLocked(keys.UnescapeDomain(k[:i]))
		// Keys are in seq order within a domain: appending keeps the heap sorted.
		d.tasks = append(d.tasks, seq)
		q.noteIDLocked(seq, v)
		q.counts.PendingCount++
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("local queue: scan pending: %w", err)
	}
	for _, d := range q.domains {
		heap.Push(&q.ready, d)
	}
	return nil
}

// requeueStale returns every stored lease to pending. Requires q.mu held.
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

// CanonicalURL returns the form of a task URL the queue stores and deduplicates on:
// discover.Canonical's (scheme and host in lower case, the host normalised as the
// limiter's key, no default port, dot segments resolved, no fragment), so that a URL
// given in a crawl file and the same URL found as a link are queued once. A URL that form
// refuses (ValidateTarget accepted it) keeps the older form: scheme and host in lower
// case, no fragment.
func CanonicalURL(u *url.URL) string {
	if s, _, err := discover.Canonical(u); err == nil {
		return s
	}
	c := *u
	c.Scheme = strings.ToLower(c.Scheme)
	c.Host = strings.ToLower(c.Host)
	c.Fragment, c.RawFragment = "", ""
	return c.String()
}

// CheckTask validates a task submitted to the queue and returns it as the queue would store
// it: canonical URL, normalised domain, min_interval_ms filled in with defaultInterval when
// absent, request_headers under hp with canonical names. Errors are EINVALID naming the
// field. The task id may be given (it must then be unique) or left for the queue to
// assign; lease_expires_at is the queue's to set.
func CheckTask(t downloader.Task, defaultInterval time.Duration, hp downloader.HeaderPolicy) (downloader.Task, error) {
	u, host, err := downloader.ValidateTarget(strings.TrimSpace(t.URL), t.Domain, t.MinIntervalMs)
	if err != nil {
		return t, err
	}
	if t.RequestHeaders, err = hp.Check("request_headers", t.RequestHeaders); err != nil {
		return t, err
	}
	if t.MinIntervalMs == nil {
		ms := defaultInterval.Milliseconds()
		t.MinIntervalMs = &ms
	} else {
		ms := *t.MinIntervalMs
		t.MinIntervalMs = &ms
	}
	if err := downloader.CheckTaskID(t.TaskID); err != nil {
		return t, err
	}
	if !t.LeaseExpiresAt.IsZero() {
		return t, downloader.Invalidf("lease_expires_at", "lease_expires_at is set by the queue when it leases the task")
	}
	t.URL = CanonicalURL(u)
	t.Domain = host
	return t, nil
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
			if rec, ok, err := q.record(b, string(id)); err != nil {
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

	b := q.ks.NewBatch()
	defer b.Close()
	next := q.counts // Lease changes only the pending and leased counts, not the map
	expires := now.Add(q.cfg.LeaseDuration).UTC()
	// The index is changed as tasks are picked; undo puts it back if the batch fails.
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
			delete(q.fresh, id) // leased now, or dropped below: not pending as stored
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
		err = b.Delete(pendingKey(d.name, seq), nil)
		if err == nil && (rec.State != TaskPending || !rec.NextAttemptAt.IsZero()) {
			// The index said pending, the record says otherwise: the record is the truth.
			// Drop the entry (its key too) and hand nothing out for it.
			q.log.Warn("pending index entry of a task not pending dropped", "task_id", id, "state", rec.State)
			next.PendingCount--
			q.dropIfEmptyLocked(d)
			continue
		}
		if err == nil {
			err = b.Set([]byte(queueLeasPrefix+rec.TaskID), nil, nil)
		}
		if err != nil {
			rollback()
			return nil, fmt.Errorf("local queue: lease: %w", err)
		}
		rec.State = TaskLeased
		rec.LeaseExpiresAt = expires
		rec.LeaseCount++
		if err := q.putRecord(b, rec); err != nil {
			rollback()
			return nil, err
		}
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
	if err := q.commit(b, next, pebble.NoSync); err != nil {
		rollback()
		return nil, err
	}
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
func (q *Queue) Report(ctx context.Context, r *downloader.Report) error {
	if r == nil || r.TaskID == "" {
		return downloader.Invalidf("task_id", "a report needs a task_id")
	}
	release, err := q.ks.Acquire(ctx, "report task")
	if err != nil {
		return err
	}
	defer release()
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.ks.NewBatch()
	defer b.Close()
	var rec *queueRecord
	if l, ok := q.leased[r.TaskID]; ok {
		// Leased by this process: the record is as Lease wrote it (every change to a leased
		// record ends its entry here), so it is not read back and decoded.
		c := *l.rec
		rec = &c
	} else {
		var ok bool
		var err error
		if rec, ok, err = q.record(b, r.TaskID); err != nil {
			return err
		} else if !ok {
			return downloader.Errorf(downloader.ENOTFOUND, "task %q is not in the local queue", r.TaskID)
		}
	}
	switch {
	case rec.State == TaskDone || rec.State == TaskSkipped:
		return nil
	case rec.State == TaskPending && !rec.NextAttemptAt.IsZero():
		return nil
	case rec.State == TaskPending && rec.Report != nil && rec.Report.FetchedAt.Equal(r.FetchedAt):
		return nil
	}
	now := q.clk.Now()
	next := q.counts.clone() // a report may change the failed counts' map
	prev := rec.State
	switch prev {
	case TaskLeased:
		if err := b.Delete([]byte(queueLeasPrefix+rec.TaskID), nil); err != nil {
			return fmt.Errorf("local queue: report: %w", err)
		}
		next.LeasedCount--
	case TaskPending:
		if err := b.Delete(pendingKey(rec.Domain, rec.Seq), nil); err != nil {
			return fmt.Errorf("local queue: report: %w", err)
		}
		next.PendingCount--
	}
	rep := *r
	rec.Report = &rep
	rec.LeaseExpiresAt = time.Time{}
	d := q.decideLocked(rec, r, now)
	switch d.action {
	case actionFinish:
		q.finishRecord(rec, r, &next)
	case actionRetryInPlace:
		rec.State = TaskPending
		if err := b.Set(pendingKey(rec.Domain, rec.Seq), []byte(rec.TaskID), nil); err != nil {
			return fmt.Errorf("local queue: report: %w", err)
		}
		next.PendingCount++
		next.RetryCount++
	case actionRetryLater:
		rec.State = TaskPending
		rec.NextAttemptAt = d.at.UTC()
		if err := b.Set(retryKey(rec.TaskID), retryValue(d.at, rec.Domain), nil); err != nil {
			return fmt.Errorf("local queue: report: %w", err)
		}
		next.PendingCount++
		next.RetryCount++
	}
	if err := q.putRecord(b, rec); err != nil {
		return err
	}
	if err := q.putCounts(b, &next); err != nil {
		return err
	}
	if err := q.commit(b, next, pebble.NoSync); err != nil {
		return err
	}
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
	return nil
}

// finishRecord marks rec finished with r and counts it into next.
func (q *Queue) finishRecord(rec *queueRecord, r *downloader.Report, next *Counts) {
	if r.SkipReason != "" {
		rec.State = TaskSkipped
		next.SkippedCount++
		return
	}
	rec.State = TaskDone
	next.DoneCount++
	if r.FailReason != nil && *r.FailReason != "" {
		next.FailedCount[*r.FailReason]++
	} else {
		next.SucceededCount++
	}
	if r.PageKey != "" {
		next.PageCount++
	}
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
	b := q.ks.NewBatch()
	defer b.Close()
	rec, ok, err := q.record(b, taskID)
	if err != nil {
		return err
	}
	if !ok {
		return downloader.Errorf(downloader.ENOTFOUND, "task %q is not in the local queue", taskID)
	}
	if rec.State != TaskLeased {
		return nil
	}
	next := q.counts
	if err := b.Delete([]byte(queueLeasPrefix+taskID), nil); err != nil {
		return fmt.Errorf("local queue: release: %w", err)
	}
	if err := q.toPending(b, rec, &next); err != nil {
		return err
	}
	if err := q.commit(b, next, pebble.NoSync); err != nil {
		return err
	}
	delete(q.leased, taskID)
	q.addPendingLocked(rec.Domain, rec.Seq, rec.TaskID, q.clk.Now().Add(max(retryAfter, 0)))
	return nil
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
	LeaseCount  int                `json:"lease_count"`
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
	return rec.taskRecord(), nil
}

// RangeDone calls f for every finished task's report (done or skipped), in task id order,
// until f returns false. It reads the whole queue; use it for summaries, not per request.
func (q *Queue) RangeDone(ctx context.Context, f func(t *downloader.Task, r *downloader.Report) bool) error {
	return rangeRecords(ctx, q.ks, func(rec *queueRecord) bool {
		return !(rec.State == TaskDone || rec.State == TaskSkipped) || rec.Report == nil || f(&rec.Task, rec.Report)
	})
}

// expireLocked returns the leases that expired by now to pending. Requires q.mu held.
func (q *Queue) expireLocked(now time.Time) error {
	var ids []string
	for q.expiry.Len() > 0 && !q.expiry[0].expiresAt.After(now) {
		e := heap.Pop(&q.expiry).(leaseEntry)
		if l, ok := q.leased[e.taskID]; ok && l.expiresAt.Equal(e.expiresAt) {
			ids = append(ids, e.taskID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	b := q.ks.NewBatch()
	defer b.Close()
	next := q.counts
	var back []*queueRecord
	for _, id := range ids {
		rec, ok, err := q.record(b, id)
		if err != nil {
			return err
		}
		if !ok || rec.State != TaskLeased {
			continue
		}
		if err := b.Delete([]byte(queueLeasPrefix+id), nil); err != nil {
			return fmt.Errorf("local queue: expire: %w", err)
		}
		if err := q.toPending(b, rec, &next); err != nil {
			return err
		}
		back = append(back, rec)
	}
	if err := q.commit(b, next, pebble.NoSync); err != nil {
		return err
	}
	for _, rec := range back {
		delete(q.leased, rec.TaskID)
		q.addPendingLocked(rec.Domain, rec.Seq, rec.TaskID, time.Time{})
	}
	if len(back) > 0 {
		q.log.Warn("leases expired: tasks handed out again", "task_count", len(back))
	}
	return nil
}

// toPending adds to b the writes that return the leased rec to pending.
func (q *Queue) toPending(b *pebble.Batch, rec *queueRecord, next *Counts) error {
	rec.State = TaskPending
	rec.LeaseExpiresAt = time.Time{}
	if err := q.putRecord(b, rec); err != nil {
		return err
	}
	if err := b.Set(pendingKey(rec.Domain, rec.Seq), []byte(rec.TaskID), nil); err != nil {
		return fmt.Errorf("local queue: requeue %s: %w", rec.TaskID, err)
	}
	next.LeasedCount--
	next.PendingCount++
	return nil
}

// addPendingLocked adds the pending task id (of seq) of domain to the in-memory index, its
// index entry written and committed, due no earlier than notBefore. Requires q.mu held.
func (q *Queue) addPendingLocked(domain string, seq uint64, id string, notBefore time.Time) {
	d := q.domainLocked(domain)
	d.tasks.push(seq)
	q.noteIDLocked(seq, []byte(id))
	if h, ok := q.holds[domain]; ok {
		if h.After(q.clk.Now()) {
			notBefore = later(notBefore, h)
		} else {
			delete(q.holds, domain)
		}
	}
	if notBefore.After(d.nextAt) {
		d.nextAt = notBefore
	}
	if d.index < 0 {
		heap.Push(&q.ready, d)
	} else {
		heap.Fix(&q.ready, d.index)
	}
}

// domainLocked returns domain's state, creating it. Requires q.mu held.
func (q *Queue) domainLocked(domain string) *queueDomain {
	d := q.domains[domain]
	if d == nil {
		d = &queueDomain{name: domain, index: -1}
		q.domains[domain] = d
	}
	return d
}

// dropIfEmptyLocked puts d back in its place in the ready heap, or forgets it once it has
// no pending task. Requires q.mu held.
func (q *Queue) dropIfEmptyLocked(d *queueDomain) {
	if d.pending() > 0 {
		if d.index >= 0 {
			heap.Fix(&q.ready, d.index)
		}
		return
	}
	if d.index >= 0 {
		heap.Remove(&q.ready, d.index)
	}
	delete(q.domains, d.name)
}

// record reads a task record through b (an indexed batch sees its own writes; nil or a
// plain batch reads the database).
func (q *Queue) record(b *pebble.Batch, id string) (*queueRecord, bool, error) {
	var (
		v   []byte
		ok  bool
		err error
	)
	if b != nil && b.Indexed() {
		v, ok, err = batchGet(b, []byte(queueTaskPrefix+id))
	} else {
		v, ok, err = q.ks.Get([]byte(queueTaskPrefix + id))
	}
	if err != nil || !ok {
		return nil, ok, err
	}
	var rec queueRecord
	if err := decodeQueueRecord(v, &rec); err != nil {
		return nil, false, fmt.Errorf("local queue: decode task %s: %w", id, err)
	}
	return &rec, true, nil
}

// putRecord adds rec to b, and forgets the fresh copy of the task's record, which the
// batch makes stale. Requires q.mu held.
func (q *Queue) putRecord(b *pebble.Batch, rec *queueRecord) error {
	delete(q.fresh, rec.TaskID)
	buf, _ := q.recordBufs.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	defer q.recordBufs.Put(buf)
	v, err := encodeQueueRecord((*buf)[:0], rec)
	if err != nil {
		return fmt.Errorf("local queue: encode task %s: %w", rec.TaskID, err)
	}
	*buf = v
	if err := b.Set([]byte(queueTaskPrefix+rec.TaskID), v, nil); err != nil {
		return fmt.Errorf("local queue: put task %s: %w", rec.TaskID, err)
	}
	return nil
}

// putCounts adds to b the stored counts of next (those no index gives back: see the
// package comment), for a batch that changes them.
func (q *Queue) putCounts(b *pebble.Batch, next *Counts) error {
	buf, _ := q.recordBufs.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	defer q.recordBufs.Put(buf)
	*buf = appendStoredCounts((*buf)[:0], next)
	if err := b.Set([]byte(queueCountsKey), *buf, nil); err != nil {
		return fmt.Errorf("local queue: put counts: %w", err)
	}
	return nil
}

// commit commits b and, on success, makes next the counts in memory. Requires q.mu held.
func (q *Queue) commit(b *pebble.Batch, next Counts, opts *pebble.WriteOptions) error {
	if err := b.Commit(opts); err != nil {
		return fmt.Errorf("local queue: commit: %w", err)
	}
	q.counts = next
	return nil
}

// batchGet reads key through an indexed batch; with a nil or plain batch it returns
// nothing (the caller reads the database).
func batchGet(b *pebble.Batch, key []byte) ([]byte, bool, error) {
	if b == nil || !b.Indexed() {
		return nil, false, nil
	}
	v, closer, err := b.Get(key)
	if err == pebble.ErrNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("local queue: get %q: %w", key, err)
	}
	out := append([]byte(nil), v...)
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("local queue: get %q: %w", key, err)
	}
	return out, true, nil
}

func pendingKey(domain string, seq uint64) []byte {
	return fmt.Appendf(nil, "%s%s:%016x", queuePendPrefix, keys.EscapeDomain(domain), seq)
}

func queueURLKey(canonical string) []byte {
	sum := sha256.Sum256([]byte(canonical))
	return []byte(queueURLPrefix + hex.EncodeToString(sum[:]))
}

// noteIDLocked remembers id as the id of the pending task of seq when it is not the seq's
// own form (defaultTaskID). Requires q.mu held.
func (q *Queue) noteIDLocked(seq uint64, id []byte) {
	var buf [16]byte
	if string(appendTaskID(buf[:0], seq)) != string(id) {
		q.otherIDs[seq] = string(id)
	}
}

// taskIDLocked is the id of the pending task of seq. Requires q.mu held.
func (q *Queue) taskIDLocked(seq uint64) string {
	if id, ok := q.otherIDs[seq]; ok {
		return id
	}
	return defaultTaskID(seq)
}

// defaultTaskID is the id the queue gives a task submitted without one: its seq, in 16
// lower-case hex digits (task ids then sort in submission order).
func defaultTaskID(seq uint64) string {
	var buf [16]byte
	return string(appendTaskID(buf[:0], seq))
}

func appendTaskID(b []byte, seq uint64) []byte {
	const digits = "0123456789abcdef"
	for i := 60; i >= 0; i -= 4 {
		b = append(b, digits[(seq>>uint(i))&0xf])
	}
	return b
}

// pendingHeap is a domain's pending tasks' seqs, a min-heap: the first submitted is the
// first handed out, and a task put back (a release, a retry in place, an expired lease)
// is first again. Written out rather than through container/heap, whose Push and Pop box
// each element.
type pendingHeap []uint64

func (h *pendingHeap) push(t uint64) {
	*h = append(*h, t)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] <= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

// pop removes and returns the lowest seq; h must not be empty.
func (h *pendingHeap) pop() uint64 {
	s := *h
	t := s[0]
	h.removeAt(0)
	return t
}

// remove removes the task of seq, reporting whether it was there. It scans the heap: it
// serves only a report of a task that is pending again, which is rare.
func (h *pendingHeap) remove(seq uint64) bool {
	for i, t := range *h {
		if t == seq {
			h.removeAt(i)
			return true
		}
	}
	return false
}

func (h *pendingHeap) removeAt(i int) {
	s := *h
	n := len(s) - 1
	s[i] = s[n]
	s = s[:n]
	*h = s
	if i == n {
		return
	}
	// Down, then up: the element moved to i may be larger or smaller than its new parent.
	j := i
	for {
		l := 2*j + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s[r] < s[l] {
			m = r
		}
		if s[j] <= s[m] {
			break
		}
		s[j], s[m] = s[m], s[j]
		j = m
	}
	for j > 0 {
		p := (j - 1) / 2
		if s[p] <= s[j] {
			break
		}
		s[p], s[j] = s[j], s[p]
		j = p
	}
}

// domainHeap orders domains by nextAt.
type domainHeap []*queueDomain

func (h domainHeap) Len() int { return len(h) }
func (h domainHeap) Less(i, j int) bool {
	if !h[i].nextAt.Equal(h[j].nextAt) {
		return h[i].nextAt.Before(h[j].nextAt)
	}
	return h[i].name < h[j].name
}
func (h domainHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *domainHeap) Push(x any) {
	d := x.(*queueDomain)
	d.index = len(*h)
	*h = append(*h, d)
}
func (h *domainHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.index = -1
	return d
}

type leaseEntry struct {
	taskID    string
	expiresAt time.Time
}

// leaseHeap orders leases by expiry.
type leaseHeap []leaseEntry

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].expiresAt.Before(h[j].expiresAt) }
func (h leaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leaseHeap) Push(x any)        { *h = append(*h, x.(leaseEntry)) }
func (h *leaseHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

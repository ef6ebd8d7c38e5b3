// Package lease is entry A: the lease loop. It takes tasks from a Source (the scheduler,
// package scheduler, or the embedded local queue, package localqueue), runs each through the
// engine (limiter with interval_source = lease, global cap, fetch or render, storage), and
// hands every outcome back: a report, written first to a durable outbox and then sent
// with backoff until the source acknowledges it, or a release when the task could not run
// within its lease.
//
// Capacity. The loop holds at most MaxHeldCount tasks at once (leased and not finished) and
// asks the source only for as many as are free, so it leases only what it can start soon:
// a task waiting for its domain's slot counts as held. Once full, it leases again when a
// sixteenth of MaxHeldCount is free (leaseBatchCount), in one call, not after every
// finished task. The scheduler rate-limits its own
// dequeue path, and the local queue hands a domain's tasks out no faster than their
// interval, so held tasks are mostly due now. The engine delays a task whose domain is over
// its interval to the reserved slot, and releases it at once when that slot would outlive
// the lease (engine.RunTask).
//
// A task's end is one write: the engine returns the report with the page and the
// fetch_result (downloader.TaskEnd) and the loop has them committed together, by the
// source itself when it can take the report in the same write (Config.Committer, the
// local queue), else by the outbox (Outbox.CommitTask); stores of their own (TiKV,
// Config.Pages and Results) are written first. Nothing is acknowledged before that write
// is durable.
//
// Reports are never lost: a finished task's report is durable in the outbox (or taken by
// the committer) before anything is acknowledged, the sender retries with exponential
// backoff while the source is down,
// and the outbox is drained first when the loop starts again after a stop or a crash. A
// report just made durable is also handed to the sender in memory (at most
// maxFreshCount at a time), which sends it without reading it back from the outbox; the
// outbox is read again at the start, at shutdown, after a failed send and when more
// reports came than the hand-off holds, so a report the hand-off missed is sent from the
// store. A
// report may be sent more than once (at least once, always with the same task_id), never
// zero times. A report the source refuses for good (an unknown task, an invalid report) is
// logged and dropped: sending it again cannot help.
//
// Shutdown (Run's ctx ends): stop leasing; wait for the held tasks, releasing those that
// come back unrun; then send what the outbox holds for up to FlushTimeout. Whatever is
// left is sent after the next start. The loop does not bound the wait itself: its caller
// owns the runner and stops it when its grace period is over (cmd/downloader stops the
// engine, which makes the tasks still waiting or in flight come back as releases), so
// that one place decides when entries A, B and C are cut short.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"downloader"
	"downloader/clock"
)

// Source hands out tasks and takes their outcomes: the scheduler's HTTP contract
// (docs/scheduler-contract.md) or the embedded local queue. Implementations are safe for
// concurrent use. Errors that sending again cannot cure (EINVALID, ENOTFOUND as
// *downloader.Error) make the loop drop a report; any other error is retried.
type Source interface {
	// Lease returns up to maxTaskCount tasks leased to workerID; none means nothing to do
	// now.
	Lease(ctx context.Context, workerID string, maxTaskCount int) ([]downloader.Task, error)
	// Report delivers a finished task's report. It must be idempotent by task_id: a report
	// may arrive more than once.
	Report(ctx context.Context, r *downloader.Report) error
	// Release hands a task back unrun before its lease ends; the source should not hand it
	// out again before retryAfter.
	Release(ctx context.Context, taskID string, retryAfter time.Duration) error
}

// BatchSource is a Source with the batched form of the contract (the scheduler client):
// many reports, or many releases, per call. The loop then sends the outbox in batches of up
// to MaxBatchCount and groups the releases made at about the same time into one call.
// errs[i] is the outcome of item i, as Report or Release would give it.
type BatchSource interface {
	Source
	ReportBatch(ctx context.Context, rs []downloader.Report) (errs []error)
	ReleaseBatch(ctx context.Context, taskIDs []string, retryAfter []time.Duration) (errs []error)
}

// BatchOutbox is an Outbox that deletes many sent reports in one write (outbox.Outbox).
type BatchOutbox interface {
	Outbox
	// DeleteReports is DeleteReport for each of rs, in one write.
	DeleteReports(ctx context.Context, rs []downloader.Report) error
}

// Runner runs one leased task (*engine.Engine). Stopping it is its owner's business (see
// the package comment): a stopped runner hands every task back as a release.
type Runner interface {
	RunTask(ctx context.Context, t *downloader.Task) downloader.LeaseReply
}

// Outbox keeps reports durably until the source acknowledged them (outbox.Outbox).
type Outbox interface {
	// CommitTask makes a task's end durable in one write: its page and fetch_result (when
	// set) and its report, replacing an earlier report of its task. It fills the report's
	// page key when it stores the page.
	CommitTask(ctx context.Context, end *downloader.TaskEnd) error
	// PendingReports returns up to limit reports whose task id sorts after after.
	PendingReports(ctx context.Context, after string, limit int) ([]downloader.Report, error)
	// DeleteReport removes r if it is still the stored report of its task.
	DeleteReport(ctx context.Context, r *downloader.Report) (bool, error)
}

// Config wires a Loop. Source, Runner and Outbox are required; zero values take the
// defaults below.
type Config struct {
	Source Source
	Runner Runner
	Outbox Outbox
	// Committer, when set, is the source's own commit of a task's end (the local queue):
	// the page, the fetch_result and the source's change of state for the report in one
	// write, so that the report is acknowledged by the commit and skips the outbox. nil:
	// the end is committed in the outbox and the report sent from there.
	Committer downloader.TaskCommitter
	// Pages and Results, when set, are stores outside the database of the outbox and the
	// Committer (TiKV): a task's page and fetch_result are written there first, each
	// durable when its call returns, then its report is committed. nil: the page and the
	// result are committed in the report's write.
	Pages   downloader.PageStore
	Results downloader.ResultStore
	Clock   clock.Clock // default clock.Real{}
	Logger  *slog.Logger
	// WorkerID names this downloader to the scheduler; default "downloader".
	WorkerID string
	// MaxHeldCount returns how many tasks the loop may hold at once. It is called before
	// every lease, so that a change of max_concurrent_count applies at once. Default 64.
	MaxHeldCount func() int
	// MaxLeaseCount bounds one lease call; default 100.
	MaxLeaseCount int
	// PollMin and PollMax bound the backoff between lease calls that found nothing or
	// failed; default 10 ms and 2 s.
	PollMin, PollMax time.Duration
	// RetryMin and RetryMax bound the backoff of report sending while the source fails;
	// default 100 ms and 30 s.
	RetryMin, RetryMax time.Duration
	// ReportConcurrency is how many reports (or, with a BatchSource, batches) are sent at
	// once; default 8.
	ReportConcurrency int
	// MaxBatchCount bounds the reports or releases of one batched call (BatchSource);
	// default 256.
	MaxBatchCount int
	// FlushTimeout bounds the last releases and report sends at shutdown; default 5 s.
	FlushTimeout time.Duration
}

// Defaults.
const (
	DefaultMaxHeldCount      = 64
	DefaultMaxLeaseCount     = 100
	DefaultPollMin           = 10 * time.Millisecond
	DefaultPollMax           = 2 * time.Second
	DefaultRetryMin          = 100 * time.Millisecond
	DefaultRetryMax          = 30 * time.Second
	DefaultReportConcurrency = 8
	DefaultMaxBatchCount     = 256
	DefaultFlushTimeout      = 5 * time.Second
)

// panicRetryAfter is how long a task whose run panicked is handed back for.
const panicRetryAfter = time.Minute

// reportPage is how many outbox reports the sender reads at a time.
const reportPage = 256

// maxFreshCount bounds the reports handed to the sender in memory and not yet taken; past
// it the sender reads the outbox instead (every report is there).
const maxFreshCount = 4 * reportPage

// Stats counts what the loop did since it was created.
type Stats struct {
	HeldCount          int   `json:"held_count"`
	LeasedCount        int64 `json:"leased_count"`
	ReportedCount      int64 `json:"reported_count"` // acknowledged by the source
	ReleasedCount      int64 `json:"released_count"`
	DroppedReportCount int64 `json:"dropped_report_count"` // refused for good by the source
	ReportFailureCount int64 `json:"report_failure_count"` // send attempts that failed and are retried
	LeaseFailureCount  int64 `json:"lease_failure_count"`
}

// Loop is the lease loop. Create it with New and call Run once. Its methods are safe for
// concurrent use.
type Loop struct {
	cfg Config
	log *slog.Logger

	held atomic.Int64
	// freed says held fell to wakeHeld or below: enough capacity is free for the lease
	// loop's next lease (leaseBatchCount).
	freed    chan struct{}
	wakeHeld atomic.Int64
	sendc    chan struct{} // a report was put in the outbox

	// fresh are reports made durable and not yet taken by the sender, which sends them
	// without reading them back; isStale says the sender must read the outbox instead
	// (a report did not fit, or a send failed and the outbox is the one full list).
	freshMu sync.Mutex
	fresh   []downloader.Report
	isStale bool

	batch    BatchSource      // cfg.Source when it has the batched form, else nil
	releasec chan releaseCall // releases waiting to be sent in one batch (batch != nil)

	leased, reported, released, dropped, reportFailures, leaseFailures atomic.Int64
}

// New returns a loop for cfg.
func New(cfg Config) (*Loop, error) {
	if cfg.Source == nil || cfg.Runner == nil || cfg.Outbox == nil {
		return nil, errors.New("lease: Source, Runner and Outbox are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = "downloader"
	}
	if cfg.MaxHeldCount == nil {
		cfg.MaxHeldCount = func() int { return DefaultMaxHeldCount }
	}
	setDefault(&cfg.MaxLeaseCount, DefaultMaxLeaseCount)
	setDefault(&cfg.PollMin, DefaultPollMin)
	setDefault(&cfg.PollMax, DefaultPollMax)
	setDefault(&cfg.RetryMin, DefaultRetryMin)
	setDefault(&cfg.RetryMax, DefaultRetryMax)
	setDefault(&cfg.ReportConcurrency, DefaultReportConcurrency)
	setDefault(&cfg.MaxBatchCount, DefaultMaxBatchCount)
	setDefault(&cfg.FlushTimeout, DefaultFlushTimeout)
	l := &Loop{cfg: cfg, log: cfg.Logger.With("component", "lease", "worker_id", cfg.WorkerID),
		freed: make(chan struct{}, 1), sendc: make(chan struct{}, 1)}
	if b, ok := cfg.Source.(BatchSource); ok {
		l.batch = b
		l.releasec = make(chan releaseCall, cfg.MaxBatchCount)
	}
	return l, nil
}

// releaseCall is one release waiting for the batch it goes out in; done gets its outcome.
type releaseCall struct {
	taskID     string
	retryAfter time.Duration
	done       chan error
}

func setDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Stats returns the loop's counters.
func (l *Loop) Stats() Stats {
	return Stats{
		HeldCount: int(l.held.Load()), LeasedCount: l.leased.Load(), ReportedCount: l.reported.Load(),
		ReleasedCount: l.released.Load(), DroppedReportCount: l.dropped.Load(),
		ReportFailureCount: l.reportFailures.Load(), LeaseFailureCount: l.leaseFailures.Load(),
	}
}

// Run sends what the outbox holds from an earlier run, then leases and runs tasks until ctx
// ends, then shuts down as the package comment says. It returns nil after a clean stop.
func (l *Loop) Run(ctx context.Context) error {
	// Tasks and reports outlive ctx: the shutdown below decides when they stop.
	bg := context.WithoutCancel(ctx)
	if _, err := l.drain(ctx); err != nil && ctx.Err() == nil {
		l.log.Warn("reports of an earlier run not sent yet", "error", err)
	}
	senderCtx, stopSender := context.WithCancel(bg)
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		l.sendLoop(senderCtx)
	}()

	releaserDone := make(chan struct{})
	stopReleaser := make(chan struct{})
	go func() {
		defer close(releaserDone)
		l.releaseLoop(bg, stopReleaser)
	}()
	defer func() { close(stopReleaser); <-releaserDone }()

	var tasks sync.WaitGroup
	pool := newWorkers()
	l.leaseLoop(ctx, bg, &tasks, pool)

	// Shutdown: wait for the held tasks; the runner's owner stops it when its grace period
	// is over, and the rest then come back as releases.
	l.log.Info("lease loop stopping", "held_count", l.held.Load())
	tasks.Wait()
	pool.stop()
	stopSender()
	<-senderDone
	flushCtx, cancel := context.WithTimeout(bg, l.cfg.FlushTimeout)
	defer cancel()
	if _, err := l.drain(flushCtx); err != nil {
		l.log.Warn("reports left in the outbox for the next start", "error", err)
	}
	l.log.Info("lease loop stopped", "reported_count", l.reported.Load(), "released_count", l.released.Load())
	return nil
}

// leaseLoop leases while ctx lasts and runs each task on bg, on one of pool's workers.
func (l *Loop) leaseLoop(ctx, bg context.Context, tasks *sync.WaitGroup, pool *workers) {
	poll := time.Duration(0)
	backoff := func() {
		poll = min(max(2*poll, l.cfg.PollMin), l.cfg.PollMax)
		_ = l.sleep(ctx, poll, nil)
	}
	for ctx.Err() == nil {
		maxHeld := l.cfg.MaxHeldCount()
		want := leaseBatchCount(maxHeld, l.cfg.MaxLeaseCount)
		free := maxHeld - int(l.held.Load())
		if free < want {
			// Wait until want tasks have finished (unhold wakes the loop then), so that
			// one lease call takes a batch of tasks rather than one per finished task;
			// look again now and then in case the capacity was raised.
			l.wakeHeld.Store(int64(maxHeld - want))
			if maxHeld-int(l.held.Load()) < want { // none finished since the look above
				_ = l.sleep(ctx, l.cfg.PollMax, l.freed)
			}
			continue
		}
		got, err := l.cfg.Source.Lease(ctx, l.cfg.WorkerID, min(free, l.cfg.MaxLeaseCount))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			l.leaseFailures.Add(1)
			l.log.Warn("lease failed", "error", err, "retry_in_ms", min(max(2*poll, l.cfg.PollMin), l.cfg.PollMax).Milliseconds())
			backoff()
			continue
		}
		if len(got) == 0 {
			backoff()
			continue
		}
		poll = 0
		l.leased.Add(int64(len(got)))
		for i := range got {
			t := &got[i] // the batch's slice, not a copy per task: nothing else uses it
			l.held.Add(1)
			if ctx.Err() != nil {
				// Leased as the loop began to stop: hand it back unrun.
				tasks.Add(1)
				pool.run(func() {
					defer tasks.Done()
					defer l.unhold()
					l.release(bg, t.TaskID, time.Second)
				})
				continue
			}
			tasks.Add(1)
			pool.run(func() {
				defer tasks.Done()
				defer l.unhold()
				l.runTask(bg, t)
			})
		}
	}
}

// leaseBatchCount is how much capacity the lease loop waits to be free before it leases
// again: a sixteenth of maxHeld (at least one task, at most one lease call's worth). A
// lease per finished task had cost a lease call (a store batch, or a round trip to the
// scheduler), a timer and a wake-up of the loop for every task; waiting for a batch leaves
// at most a sixteenth of the held tasks' places empty for a moment, and with the service's
// default of several held tasks per global slot (docs/decisions.md) every slot still has
// tasks waiting for it.
func leaseBatchCount(maxHeld, maxLease int) int {
	return max(1, min(maxHeld/16, maxLease))
}

func (l *Loop) unhold() {
	if l.held.Add(-1) > l.wakeHeld.Load() {
		return // the loop waits for more capacity than that (leaseBatchCount)
	}
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// runTask runs t and hands its outcome back.
func (l *Loop) runTask(ctx context.Context, t *downloader.Task) {
	defer func() {
		if v := recover(); v != nil {
			l.log.Error("task run panicked: released", "task_id", t.TaskID, "url", t.URL, "panic", v, "stack", string(debug.Stack()))
			l.release(ctx, t.TaskID, panicRetryAfter)
		}
	}()
	out := l.cfg.Runner.RunTask(ctx, t)
	switch {
	case out.Report != nil:
		l.finish(ctx, out.End())
	case out.Release:
		l.release(ctx, t.TaskID, out.RetryAfter)
	default:
		l.log.Error("task run returned neither a report nor a release: released", "task_id", t.TaskID)
		l.release(ctx, t.TaskID, time.Second)
	}
}

// finish commits the task's end (commit) and hands the report to the sender, unless the
// Committer's commit delivered it. If the end cannot be committed (the store is closed or
// failing), the task is not acknowledged and its lease runs out: it runs again (at least
// once).
func (l *Loop) finish(ctx context.Context, end *downloader.TaskEnd) {
	r := end.Report
	delay := l.cfg.RetryMin
	for attempt := 1; ; attempt++ {
		err := l.commit(ctx, end)
		if err == nil {
			break
		}
		if l.cfg.Committer != nil && permanent(err) {
			// The source refused the report for good: its writes are committed (the
			// Committer's contract), the report is dropped as a sent one would be.
			l.sent(r, err)
			return
		}
		if attempt == 3 || downloader.ErrorCode(err) == downloader.EUNAVAILABLE {
			l.log.Error("report not stored: the task will run again after its lease", "task_id", r.TaskID, "error", err)
			return
		}
		l.log.Warn("store report failed: retrying", "task_id", r.TaskID, "error", err)
		if l.sleep(ctx, delay, nil) != nil {
			return
		}
		delay *= 2
	}
	if l.cfg.Committer != nil {
		l.sent(r, nil)
		return
	}
	l.freshMu.Lock()
	if len(l.fresh) < maxFreshCount {
		l.fresh = append(l.fresh, *r)
	} else {
		l.isStale = true
	}
	l.freshMu.Unlock()
	select {
	case l.sendc <- struct{}{}:
	default:
	}
}

// commit makes end durable in one write: in the Committer, else in the outbox. With
// stores of their own (Config.Pages, Results) the page and the result are written there
// first, once: a retry commits the rest.
func (l *Loop) commit(ctx context.Context, end *downloader.TaskEnd) error {
	if end.Page != nil && l.cfg.Pages != nil {
		key, err := l.cfg.Pages.PutPage(ctx, end.Page)
		if err != nil {
			return fmt.Errorf("put page of %s: %w", end.Page.URL, err)
		}
		end.SetPageKey(key)
		end.Page = nil
	}
	if end.Result != nil && l.cfg.Results != nil {
		if err := l.cfg.Results.PutFetchResult(ctx, end.Result); err != nil {
			return fmt.Errorf("put fetch_result of %s: %w", end.Result.URL, err)
		}
		end.Result = nil
	}
	if l.cfg.Committer != nil {
		return l.cfg.Committer.CommitTask(ctx, end)
	}
	return l.cfg.Outbox.CommitTask(ctx, end)
}

// takeFresh returns up to reportPage reports handed over in memory, or fromStore when the
// sender must read the outbox instead (which holds them all: they are dropped).
func (l *Loop) takeFresh() (page []downloader.Report, fromStore bool) {
	l.freshMu.Lock()
	defer l.freshMu.Unlock()
	if l.isStale {
		l.isStale, l.fresh = false, l.fresh[:0]
		return nil, true
	}
	n := min(len(l.fresh), reportPage)
	page = append([]downloader.Report(nil), l.fresh[:n]...)
	l.fresh = append(l.fresh[:0], l.fresh[n:]...)
	return page, false
}

// hasFresh reports whether reports wait in memory, or in the outbox after a hand-off
// overflowed.
func (l *Loop) hasFresh() bool {
	l.freshMu.Lock()
	defer l.freshMu.Unlock()
	return len(l.fresh) > 0 || l.isStale
}

// markStale makes the sender read the outbox next: a send failed, and the reports of the
// failed page are there.
func (l *Loop) markStale() {
	l.freshMu.Lock()
	l.isStale = true
	l.freshMu.Unlock()
}

// release hands a task back, trying for up to FlushTimeout. A release that does not get
// through is harmless: the lease runs out and the source hands the task out again.
func (l *Loop) release(ctx context.Context, taskID string, retryAfter time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.FlushTimeout)
	defer cancel()
	delay := l.cfg.RetryMin
	for {
		err := l.releaseOnce(ctx, taskID, retryAfter)
		if err == nil {
			l.released.Add(1)
			return
		}
		if permanent(err) || ctx.Err() != nil {
			l.log.Warn("release failed: the lease will run out instead", "task_id", taskID, "error", err)
			return
		}
		if l.sleep(ctx, delay, nil) != nil {
			l.log.Warn("release failed: the lease will run out instead", "task_id", taskID, "error", err)
			return
		}
		delay = min(2*delay, l.cfg.RetryMax)
	}
}

// releaseOnce hands a task back once: in the next batch with a BatchSource, else alone.
func (l *Loop) releaseOnce(ctx context.Context, taskID string, retryAfter time.Duration) error {
	if l.batch == nil {
		return l.cfg.Source.Release(ctx, taskID, retryAfter)
	}
	c := releaseCall{taskID: taskID, retryAfter: retryAfter, done: make(chan error, 1)}
	select {
	case l.releasec <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// releaseLoop sends the releases queued by releaseOnce, all those waiting at once in one
// call (up to MaxBatchCount), until stop is closed. Nothing is queued then: Run closes stop
// after every task, and so every release, has finished.
func (l *Loop) releaseLoop(ctx context.Context, stop <-chan struct{}) {
	if l.batch == nil {
		return
	}
	for {
		var first releaseCall
		select {
		case first = <-l.releasec:
		case <-stop:
			return
		}
		calls := []releaseCall{first}
	more:
		for len(calls) < l.cfg.MaxBatchCount {
			select {
			case c := <-l.releasec:
				calls = append(calls, c)
			default:
				break more
			}
		}
		ids := make([]string, len(calls))
		waits := make([]time.Duration, len(calls))
		for i, c := range calls {
			ids[i], waits[i] = c.taskID, c.retryAfter
		}
		callCtx, cancel := context.WithTimeout(ctx, l.cfg.FlushTimeout)
		errs := l.batch.ReleaseBatch(callCtx, ids, waits)
		cancel()
		for i, c := range calls {
			var err error
			if i < len(errs) {
				err = errs[i]
			} else {
				err = fmt.Errorf("release %s: no outcome from the source", c.taskID)
			}
			c.done <- err
		}
	}
}

// sendLoop sends the reports handed over in memory whenever a report is put, or drains
// the outbox when the hand-off missed some or a send failed, backing off while sends
// fail.
func (l *Loop) sendLoop(ctx context.Context) {
	delay := time.Duration(0)
	for {
		var (
			failed bool
			err    error
		)
		if page, fromStore := l.takeFresh(); fromStore {
			failed, err = l.drain(ctx)
		} else if len(page) > 0 {
			failed, err = l.sendPage(ctx, page)
		}
		if ctx.Err() != nil {
			return
		}
		if failed || err != nil {
			l.markStale()
			delay = min(max(2*delay, l.cfg.RetryMin), l.cfg.RetryMax)
			if err != nil {
				l.log.Warn("sending reports failed: retrying", "error", err, "retry_in_ms", delay.Milliseconds())
			}
			if l.sleep(ctx, delay, nil) != nil {
				return
			}
			continue
		}
		delay = 0
		if l.hasFresh() {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-l.sendc:
		}
	}
}

// drain sends every report in the outbox once and deletes those the source acknowledged
// or refused for good. With a BatchSource a page goes out in calls of up to MaxBatchCount
// reports, ReportConcurrency calls at once; otherwise one report per call,
// ReportConcurrency at once. It stops at the first page with a failed send (the source is
// probably down) and then reports failed.
func (l *Loop) drain(ctx context.Context) (failed bool, err error) {
	after := ""
	for ctx.Err() == nil {
		page, err := l.cfg.Outbox.PendingReports(ctx, after, reportPage)
		if err != nil {
			return true, fmt.Errorf("read outbox: %w", err)
		}
		if len(page) == 0 {
			return false, nil
		}
		after = page[len(page)-1].TaskID
		if failed, err := l.sendPage(ctx, page); failed {
			return true, err
		}
	}
	return true, ctx.Err()
}

// sendPage sends page as drain does and deletes from the outbox the reports the source
// acknowledged or refused for good. failed says a send failed (err is the last such).
func (l *Loop) sendPage(ctx context.Context, page []downloader.Report) (failed bool, err error) {
	size := 1
	if l.batch != nil {
		size = l.cfg.MaxBatchCount
	}
	var (
		wg      sync.WaitGroup
		sem     = make(chan struct{}, l.cfg.ReportConcurrency)
		mu      sync.Mutex
		lastErr error
		done    = make([]bool, len(page)) // acknowledged or refused for good: delete
	)
	for lo := 0; lo < len(page); lo += size {
		chunk := page[lo:min(lo+size, len(page))]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var errs []error
			if l.batch != nil {
				errs = l.batch.ReportBatch(ctx, chunk)
			} else {
				errs = []error{l.cfg.Source.Report(ctx, &chunk[0])}
			}
			for k := range chunk {
				var err error
				if k < len(errs) {
					err = errs[k]
				} else {
					err = fmt.Errorf("report %s: no outcome from the source", chunk[k].TaskID)
				}
				if l.sent(&chunk[k], err) {
					done[lo+k] = true
				} else {
					mu.Lock()
					lastErr = fmt.Errorf("report %s: %w", chunk[k].TaskID, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	l.deleteSent(ctx, page, done)
	if lastErr != nil {
		return true, lastErr
	}
	return false, nil
}

// sent counts the outcome err of sending r and reports whether r is to be deleted from
// the outbox (acknowledged or refused for good).
func (l *Loop) sent(r *downloader.Report, err error) bool {
	switch {
	case err == nil:
		l.reported.Add(1)
	case permanent(err):
		l.dropped.Add(1)
		l.log.Error("report refused by the source: dropped", "task_id", r.TaskID, "error", err)
	default:
		l.reportFailures.Add(1)
		return false
	}
	return true
}

// deleteSent removes from the outbox the reports of page marked done, in one write when
// the outbox can. A delete that fails is harmless: the report is sent again (at least once).
func (l *Loop) deleteSent(ctx context.Context, page []downloader.Report, done []bool) {
	var rs []downloader.Report
	for i, ok := range done {
		if ok {
			rs = append(rs, page[i])
		}
	}
	if len(rs) == 0 {
		return
	}
	if bo, ok := l.cfg.Outbox.(BatchOutbox); ok {
		if err := bo.DeleteReports(ctx, rs); err != nil {
			l.log.Warn("delete sent reports from the outbox", "report_count", len(rs), "error", err)
		}
		return
	}
	for i := range rs {
		if _, err := l.cfg.Outbox.DeleteReport(ctx, &rs[i]); err != nil {
			l.log.Warn("delete sent report from the outbox", "task_id", rs[i].TaskID, "error", err)
		}
	}
}

// permanent reports whether err is a refusal that retrying cannot cure.
func permanent(err error) bool {
	switch downloader.ErrorCode(err) {
	case downloader.EINVALID, downloader.ENOTFOUND:
		return true
	}
	return false
}

// sleep waits d on the loop's clock, or until wake (if not nil) or ctx ends.
func (l *Loop) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := l.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Package lease is entry A: the lease loop. It takes tasks from a Source (the scheduler,
// package scheduler, or the embedded local queue, store/embedded), runs each through the
// engine (limiter with interval_source = lease, global cap, fetch or render, storage), and
// hands every outcome back: a report, written first to a durable outbox and then sent
// with backoff until the source acknowledges it, or a release when the task could not run
// within its lease.
//
// Capacity. The loop holds at most MaxHeldCount tasks at once (leased and not finished) and
// asks the source only for as many as are free, so it leases only what it can start soon:
// a task waiting for its domain's slot counts as held. The scheduler rate-limits its own
// dequeue path, and the local queue hands a domain's tasks out no faster than their
// interval, so held tasks are mostly due now. The engine delays a task whose domain is over
// its interval to the reserved slot, and releases it at once when that slot would outlive
// the lease (engine.RunTask).
//
// Reports are never lost: a finished task's report is durable in the outbox before anything
// is acknowledged, the sender retries with exponential backoff while the source is down,
// and the outbox is drained first when the loop starts again after a stop or a crash. A
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
	"downloader/engine"
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

// Runner runs one leased task (*engine.Engine). Stopping it is its owner's business (see
// the package comment): a stopped runner hands every task back as a release.
type Runner interface {
	RunTask(ctx context.Context, t *downloader.Task) engine.TaskOutcome
}

// Outbox keeps reports durably until the source acknowledged them (embedded.Outbox).
type Outbox interface {
	// PutReport returns once r is durable, replacing an earlier report of its task.
	PutReport(ctx context.Context, r *downloader.Report) error
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
	Clock  clock.Clock // default clock.Real{}
	Logger *slog.Logger
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
	// ReportConcurrency is how many reports are sent at once; default 8.
	ReportConcurrency int
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
	DefaultFlushTimeout      = 5 * time.Second
)

// panicRetryAfter is how long a task whose run panicked is handed back for.
const panicRetryAfter = time.Minute

// reportPage is how many outbox reports the sender reads at a time.
const reportPage = 256

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

	held  atomic.Int64
	freed chan struct{} // a held task finished (capacity freed)
	sendc chan struct{} // a report was put in the outbox

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
	setDefault(&cfg.FlushTimeout, DefaultFlushTimeout)
	return &Loop{cfg: cfg, log: cfg.Logger.With("component", "lease", "worker_id", cfg.WorkerID),
		freed: make(chan struct{}, 1), sendc: make(chan struct{}, 1)}, nil
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

	var tasks sync.WaitGroup
	l.leaseLoop(ctx, bg, &tasks)

	// Shutdown: wait for the held tasks; the runner's owner stops it when its grace period
	// is over, and the rest then come back as releases.
	l.log.Info("lease loop stopping", "held_count", l.held.Load())
	tasks.Wait()
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

// leaseLoop leases while ctx lasts and starts a goroutine per task on bg.
func (l *Loop) leaseLoop(ctx, bg context.Context, tasks *sync.WaitGroup) {
	poll := time.Duration(0)
	backoff := func() {
		poll = min(max(2*poll, l.cfg.PollMin), l.cfg.PollMax)
		_ = l.sleep(ctx, poll, nil)
	}
	for ctx.Err() == nil {
		free := l.cfg.MaxHeldCount() - int(l.held.Load())
		if free <= 0 {
			// Wait for a task to finish; look again now and then in case the capacity
			// was raised.
			_ = l.sleep(ctx, l.cfg.PollMax, l.freed)
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
			t := got[i]
			l.held.Add(1)
			if ctx.Err() != nil {
				// Leased as the loop began to stop: hand it back unrun.
				tasks.Add(1)
				go func() {
					defer tasks.Done()
					defer l.unhold()
					l.release(bg, t.TaskID, time.Second)
				}()
				continue
			}
			tasks.Add(1)
			go func() {
				defer tasks.Done()
				defer l.unhold()
				l.runTask(bg, &t)
			}()
		}
	}
}

func (l *Loop) unhold() {
	l.held.Add(-1)
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
		l.finish(ctx, out.Report)
	case out.Release:
		l.release(ctx, t.TaskID, out.RetryAfter)
	default:
		l.log.Error("task run returned neither a report nor a release: released", "task_id", t.TaskID)
		l.release(ctx, t.TaskID, time.Second)
	}
}

// finish makes r durable in the outbox and wakes the sender. If the outbox cannot take it
// (the store is closed or failing), the task is not acknowledged and its lease runs out:
// it runs again (at least once).
func (l *Loop) finish(ctx context.Context, r *downloader.Report) {
	delay := l.cfg.RetryMin
	for attempt := 1; ; attempt++ {
		err := l.cfg.Outbox.PutReport(ctx, r)
		if err == nil {
			break
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
	select {
	case l.sendc <- struct{}{}:
	default:
	}
}

// release hands a task back, trying for up to FlushTimeout. A release that does not get
// through is harmless: the lease runs out and the source hands the task out again.
func (l *Loop) release(ctx context.Context, taskID string, retryAfter time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.FlushTimeout)
	defer cancel()
	delay := l.cfg.RetryMin
	for {
		err := l.cfg.Source.Release(ctx, taskID, retryAfter)
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

// sendLoop drains the outbox whenever a report is put, backing off while sends fail.
func (l *Loop) sendLoop(ctx context.Context) {
	delay := time.Duration(0)
	for {
		failed, err := l.drain(ctx)
		if ctx.Err() != nil {
			return
		}
		if failed || err != nil {
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
		select {
		case <-ctx.Done():
			return
		case <-l.sendc:
		}
	}
}

// drain sends every report in the outbox once, ReportConcurrency at a time, and deletes
// those the source acknowledged or refused for good. It stops at the first page with a
// failed send (the source is probably down) and then reports failed.
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
		var (
			wg      sync.WaitGroup
			sem     = make(chan struct{}, l.cfg.ReportConcurrency)
			mu      sync.Mutex
			lastErr error
		)
		for i := range page {
			r := &page[i]
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if err := l.send(ctx, r); err != nil {
					mu.Lock()
					lastErr = err
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if lastErr != nil {
			return true, lastErr
		}
	}
	return true, ctx.Err()
}

// send delivers one report and removes it from the outbox once acknowledged or refused for
// good. It returns the error of a send to retry.
func (l *Loop) send(ctx context.Context, r *downloader.Report) error {
	err := l.cfg.Source.Report(ctx, r)
	switch {
	case err == nil:
		l.reported.Add(1)
	case permanent(err):
		l.dropped.Add(1)
		l.log.Error("report refused by the source: dropped", "task_id", r.TaskID, "error", err)
	default:
		l.reportFailures.Add(1)
		return fmt.Errorf("report %s: %w", r.TaskID, err)
	}
	if _, err := l.cfg.Outbox.DeleteReport(ctx, r); err != nil {
		// It will be sent again: at least once.
		l.log.Warn("delete sent report from the outbox", "task_id", r.TaskID, "error", err)
	}
	return nil
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

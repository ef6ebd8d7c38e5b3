package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/engine"
	"downloader/lease"
	"downloader/limiter"
	"downloader/localqueue"
	"downloader/netguard"
	"downloader/outbox"
	"downloader/robots"
	"downloader/scheduler"
	"downloader/server"
	"downloader/store/embedded"
)

// leaseConfig is entry A's part of the flags.
type leaseConfig struct {
	SchedulerURL string
	WorkerID     string
	// The local queue's own parts (it plays the sampler and the scheduler, SPEC §1):
	// robots.txt and retries. Neither applies with a scheduler.
	ShouldObeyRobotsTxt bool
	MaxAttemptCount     int
}

// addLeaseFlags declares entry A's flags into c.
func addLeaseFlags(fs *flag.FlagSet, c *leaseConfig) {
	fs.StringVar(&c.SchedulerURL, "scheduler-url", "", "the scheduler's base URL (docs/scheduler-contract.md); empty: tasks come from the embedded local queue in the data dir (POST /v1/tasks, downloader crawl)")
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "downloader"
	}
	fs.StringVar(&c.WorkerID, "worker-id", host, "this downloader's name in its lease calls to the scheduler")
	addLocalQueueFlags(fs, c)
}

// addLocalQueueFlags declares the local queue's flags (crawl shows only these of entry A).
func addLocalQueueFlags(fs *flag.FlagSet, c *leaseConfig) {
	fs.BoolVar(&c.ShouldObeyRobotsTxt, "should-obey-robots-txt", true, "local queue only: fetch each site's robots.txt first and obey it for our User-Agent's product token (RFC 9309; Crawl-delay raises min_interval_ms); false for an operator's own sites")
	fs.IntVar(&c.MaxAttemptCount, "max-attempt-count", localqueue.DefaultMaxAttemptCount, "local queue only: attempts that reach the origin per task; 5xx, 408, 429, timeouts and resets are retried after an exponential backoff (at least the origin's Retry-After), failures of our own in place without counting")
}

// Entry A's wiring constants.
const (
	// heldPerSlot: the loop holds up to this many tasks per global slot (max_concurrent_count),
	// so that tasks waiting for their domain's slot, or writing their results, do not leave
	// the global slots idle (measured in docs/benchmarks-lease.md: 2 per slot capped plain
	// throughput well below the global cap).
	heldPerSlot = 4
	// localPollMax: the local queue is in-process and cheap to ask, and its lookahead
	// (localqueue.DefaultLookahead, 500 ms) must cover the poll, so it is asked often.
	localPollMax = 50 * time.Millisecond
	// maxLeaseCount bounds one lease call.
	maxLeaseCount = 100
)

// entryA is the lease loop with its source (the scheduler or the local queue) and outbox.
type entryA struct {
	log          *slog.Logger
	loop         *lease.Loop
	runner       interface{ Stop() } // the loop's runner: the engine, or robots.txt in front of it
	queue        *localqueue.Queue   // nil with a scheduler
	client       *scheduler.Client   // nil with the local queue
	defaultIv    time.Duration
	headerPolicy downloader.HeaderPolicy
	// stopLeasing ends the loop's run and done is closed once it returned; both are set
	// by service.wait, which runs the loop as an actor (nil before).
	stopLeasing context.CancelFunc
	done        chan struct{}
}

// taskStores are where entry A's pages and fetch_results are kept: st's own, or TiKV's.
type taskStores struct {
	pages   downloader.PageStore
	results downloader.ResultStore
}

// newEntryA builds entry A on st: with c.Lease.SchedulerURL set it leases from the
// scheduler, else from the local queue kept in st. A task's end is committed in one
// write of st (its page, fetch_result and report, or with the local queue the queue's
// change of state instead of the report); with the TiKV store its page and fetch_result
// are written to TiKV first (ts).
func newEntryA(ctx context.Context, c *config, logger *slog.Logger, clk clock.Clock, st *embedded.Store, ts taskStores, eng *engine.Engine, gate *limiter.Gate, guard *netguard.Guard) (*entryA, error) {
	a := &entryA{log: logger, defaultIv: time.Duration(c.DefaultMinIntervalMs) * time.Millisecond, headerPolicy: c.headerPolicy()}
	cfg := lease.Config{
		Runner: eng, Outbox: outbox.New(st), Clock: clk, Logger: logger, WorkerID: c.Lease.WorkerID,
		MaxHeldCount:  func() int { return heldPerSlot * gate.Capacity() },
		MaxLeaseCount: maxLeaseCount,
	}
	if c.Cluster.Store == storeTiKV {
		cfg.Pages, cfg.Results = ts.pages, ts.results
	}
	if c.Lease.SchedulerURL != "" {
		cl, err := scheduler.New(scheduler.Config{URL: c.Lease.SchedulerURL, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("--scheduler-url: %s", downloader.ErrorMessage(err))
		}
		a.client, cfg.Source = cl, cl
	} else {
		q, err := localqueue.Open(ctx, st, localqueue.Config{Clock: clk, Logger: logger, DefaultMinInterval: a.defaultIv,
			HeaderPolicy: a.headerPolicy, MaxAttemptCount: c.Lease.MaxAttemptCount, CheckURLHost: guard.CheckURLHost})
		if err != nil {
			return nil, fmt.Errorf("open local queue: %w", err)
		}
		a.queue, cfg.Source, cfg.Committer = q, q, q
		if c.discovery != nil {
			// Discovery reads a task's page before the queue takes its report
			// (discoverSource): the end goes through the outbox, the report after it.
			cfg.Committer = nil
			if c.Cluster.Store == storeTiKV {
				return nil, fmt.Errorf("crawl --max-depth reads the pages from the embedded store: not with --store tikv")
			}
			if cfg.Source, err = c.discovery.attach(q, st); err != nil {
				return nil, err
			}
		}
		cfg.PollMax = localPollMax
		if c.Lease.ShouldObeyRobotsTxt {
			// robots.txt is a request of the engine's like the task's own (FetchUnstored):
			// admitted cluster-wide too with --store tikv (SPEC §2).
			rr, err := robots.New(robots.Config{Next: eng, Fetcher: eng, Clock: clk,
				Logger: logger, UserAgent: c.UserAgent, MaxAttemptCount: c.Lease.MaxAttemptCount,
				CrawlDelay: q.SetCrawlDelay, Sitemaps: c.discovery.robotsSitemaps()})
			if err != nil {
				return nil, err
			}
			cfg.Runner = rr
		}
	}
	loop, err := lease.New(cfg)
	if err != nil {
		a.close()
		return nil, err
	}
	a.loop = loop
	a.runner = eng
	if r, ok := cfg.Runner.(interface{ Stop() }); ok {
		a.runner = r
	}
	return a, nil
}

// taskQueue is what POST /v1/tasks feeds: the local queue, or nil with a scheduler.
func (a *entryA) taskQueue() server.TaskQueue {
	if a.queue == nil {
		return nil
	}
	return queueAdapter{q: a.queue}
}

// run runs the loop until ctx ends, then through its shutdown (lease.Loop.Run).
func (a *entryA) run(ctx context.Context) {
	if err := a.loop.Run(ctx); err != nil {
		a.log.Error("lease loop stopped with an error", "error", err)
	}
}

// stop makes the loop stop leasing and shut down: it waits for its held tasks (until
// stopTasks cuts them short), releases what comes back and flushes its reports; the
// returned channel is closed when it is done.
func (a *entryA) stop() <-chan struct{} {
	if a.stopLeasing == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	a.stopLeasing()
	return a.done
}

// stopTasks makes the tasks the loop holds come back as releases at once: its runner
// stops (robots.txt's waits, then the engine, which also cuts B and C short).
func (a *entryA) stopTasks() { a.runner.Stop() }

// close releases what newEntryA opened; call it after the loop is done.
func (a *entryA) close() {
	if a.client != nil {
		a.client.Close()
	}
}

// queueAdapter serves POST /v1/tasks from the embedded local queue.
type queueAdapter struct {
	q *localqueue.Queue
}

func (a queueAdapter) CheckTask(t downloader.Task) error {
	_, err := a.q.CheckTask(t)
	return err
}

func (a queueAdapter) SubmitTasks(ctx context.Context, tasks []downloader.Task) ([]server.TaskSubmission, error) {
	res, err := a.q.Submit(ctx, tasks)
	if err != nil {
		return nil, err
	}
	out := make([]server.TaskSubmission, len(res))
	for i, r := range res {
		out[i] = server.TaskSubmission{TaskID: r.TaskID, URL: r.URL, IsDuplicate: r.IsDuplicate, State: r.State}
	}
	return out, nil
}

func (a queueAdapter) TaskStatus(ctx context.Context, taskID string) (*downloader.TaskStatus, error) {
	return a.q.TaskStatus(ctx, taskID)
}

func (a queueAdapter) ListTasks(ctx context.Context, state downloader.TaskState, cursor string, limit int) ([]downloader.TaskStatus, string, error) {
	return a.q.ListTasks(ctx, state, cursor, limit)
}

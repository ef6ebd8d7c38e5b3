package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"downloader"
	"downloader/internal/httpjson"
	"downloader/localqueue"
)

const crawlUsage = `usage: downloader crawl [flags] FILE

Crawls the URLs in FILE on this machine, politely, with no scheduler: they go into the
local queue in the data dir and the service (entries A, B, C and the console) runs until
every one is done. FILE has one URL a line, or one JSON object a line with the task
fields (url, and optionally domain, min_interval_ms, should_render, should_store,
task_id); blank lines and lines starting with # are skipped. A task without
min_interval_ms gets --default-min-interval-ms; should_store defaults to true.

Each site's robots.txt is read first and obeyed (RFC 9309, for the product token of
--user-agent; its Crawl-delay raises the interval); a disallowed URL is never fetched and
is counted as skipped. --should-obey-robots-txt=false turns that off for your own sites.
A task that reached the origin and failed transiently (5xx, 408, 429, a timeout, a reset)
is retried after a backoff, at least the origin's Retry-After, up to --max-attempt-count
attempts; one that failed for the downloader's own reasons is retried in place.

--output FILE writes one JSON line per task when the crawl ends or is stopped (its summary
fields, task_id, url, final_url, page_key, state, attempt_count, skip_reason); --warc FILE
writes the stored pages as WARC/1.1 (gzipped when FILE ends in .gz). Both are written
whole to a temporary file beside FILE and renamed over it, so a stop never leaves a
shorter file than before; FILE - is standard output, which then carries nothing else
(the summary goes to standard error). 'downloader export' writes the same from a data
dir later. While it runs, GET /v1/tasks/{task_id} and
GET /v1/tasks?state= on the API show each task.

Ctrl-C stops politely (in-flight requests finish within the grace period). Run the same
command again to resume: a URL already queued in the data dir is never queued twice.

Exit status: 0 when every task is done and none failed for the downloader's own reasons
(has_reached_origin=false); 1 when some did, or some lines were invalid; 130 when
interrupted (SIGINT, Ctrl-C), 143 when terminated (SIGTERM).

Flags (each also DOWNLOADER_<FLAG>):

`

// crawlSubmitChunk is how many tasks go into the queue per Submit.
const crawlSubmitChunk = 1000

// maxInvalidLinesShown bounds the invalid lines printed one by one.
const maxInvalidLinesShown = 20

func runCrawl(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	c.LogLevel = slog.LevelWarn // the progress goes to the terminal; the log only warns
	fs := newFlagSet("crawl", &c, stderr)
	// A crawl serves its API and console on a free port unless told otherwise, so that it
	// does not collide with a running serve.
	c.Listen = "127.0.0.1:0"
	fs.Lookup("listen").DefValue = c.Listen
	fs.Lookup("log-level").DefValue = "warn"
	var outputPath, warcPath string
	fs.StringVar(&outputPath, "output", "", "write one JSON line per task to this file when the crawl ends (- for standard output)")
	fs.StringVar(&warcPath, "warc", "", "write the stored pages to this WARC/1.1 file when the crawl ends (gzipped per record when it ends in .gz)")
	var dc discoverConfig
	addDiscoverFlags(fs, &dc)
	fs.Usage = func() {
		fmt.Fprint(stderr, crawlUsage)
		printFlags(stderr, fs, crawlFlagNames)
	}
	if err := parseFlags(fs, &c, args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, "downloader crawl: want exactly one FILE\n\n")
		fs.Usage()
		return errUsage
	}
	if c.Lease.SchedulerURL != "" {
		return fmt.Errorf("crawl uses the local queue: --scheduler-url cannot be set (use serve)")
	}
	path := fs.Arg(0)
	var err error
	if c.discovery, err = newDiscovery(dc, newLogger(stderr, c.LogLevel)); err != nil {
		return fmt.Errorf("%s", downloader.ErrorMessage(err))
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	outputs, err := planOutputs(outputPath, warcPath, stdout)
	if err != nil {
		return err
	}
	// With an output on standard output, it carries the data alone.
	human := stdout
	if outputs.usesStdout() {
		human = stderr
	}

	wires := &wireLog{}
	c.observeWire = wires.observe
	c.isStopping = func() bool { return ctx.Err() != nil }
	start := time.Now()
	logger := newLogger(stderr, c.LogLevel)
	svcCtx, stopSvc := context.WithCancel(context.Background())
	defer stopSvc()
	svc, err := startService(svcCtx, &c, logger)
	if err != nil {
		return dataDirInUse(err, c.DataDir)
	}
	svcDone := make(chan error, 1)
	go func() { svcDone <- svc.wait(svcCtx) }()
	stopService := func() error {
		stopSvc()
		return <-svcDone
	}
	q := svc.entryA.queue
	fmt.Fprintf(stderr, "downloader: console on http://%s/ (API under /v1/, data dir %s)\n", svc.addr, c.DataDir)

	if err := seedDiscovery(ctx, c.discovery, q, path); err != nil {
		_ = stopService()
		return err
	}
	in, err := submitFile(ctx, q, f, path, stderr)
	if err != nil && ctx.Err() == nil {
		_ = stopService()
		return err
	}
	fmt.Fprintf(stderr, "downloader: %s: %s\n", path, in.describe())

	interrupted := ctx.Err() != nil || waitCrawl(ctx, q, isTerminal(stderr), stderr)
	if interrupted {
		fmt.Fprintln(stderr, "downloader: interrupted: stopping politely (in-flight requests may finish)…")
	}
	found := collectDiscovery(context.WithoutCancel(ctx), c.discovery, q) // before the store closes
	if err := stopService(); err != nil {
		return err
	}
	counts := q.Counts()
	printSummary(human, counts, in, time.Since(start), wires, interrupted)
	printDiscovery(human, found)
	if outputs.isSet() {
		// The export has a context of its own: a stop must not cut the outputs short.
		if err := outputs.write(context.WithoutCancel(ctx), c.DataDir, c.UserAgent, stderr); err != nil {
			return err
		}
	}

	switch {
	case interrupted:
		return &exitError{code: interruptCode(ctx), err: errors.New("interrupted: run the same command again to resume")}
	case counts.OwnFailureCount() > 0:
		return fmt.Errorf("%d tasks failed for the downloader's own reasons (has_reached_origin=false)", counts.OwnFailureCount())
	case in.invalidCount > 0:
		return fmt.Errorf("%d lines of %s are invalid and were not crawled", in.invalidCount, path)
	}
	return nil
}

// crawlInput is what submitFile read.
type crawlInput struct {
	taskCount      int // valid task lines in the file
	newCount       int // of which queued now
	duplicateCount int // of which repeat an earlier line of the file (the same task)
	invalidCount   int
}

// describe says what the file held: tasks new, queued by an earlier run, and lines that
// repeat an earlier line's task (a duplicate in the list is not "queued before").
func (in crawlInput) describe() string {
	s := fmt.Sprintf("%d tasks (%d new, %d queued before", in.taskCount-in.duplicateCount, in.newCount,
		in.taskCount-in.duplicateCount-in.newCount)
	if in.duplicateCount > 0 {
		s += fmt.Sprintf("; %d duplicate lines", in.duplicateCount)
	}
	return s + fmt.Sprintf("), %d invalid lines", in.invalidCount)
}

// crawlLine is one JSON line: the task fields a crawl file may give.
type crawlLine struct {
	TaskID        string `json:"task_id"`
	URL           string `json:"url"`
	Domain        string `json:"domain"`
	MinIntervalMs *int64 `json:"min_interval_ms"`
	ShouldRender  bool   `json:"should_render"`
	ShouldStore   *bool  `json:"should_store"`
}

// submitFile reads r line by line, reports invalid lines on w (FILE:LINE: field: why) and
// queues the valid tasks in chunks.
func submitFile(ctx context.Context, q *localqueue.Queue, r io.Reader, name string, w io.Writer) (crawlInput, error) {
	var in crawlInput
	var chunk []downloader.Task
	// seen holds a hash of every task id of the file so far (8 B a task, not its id), to
	// tell a line repeating an earlier one from a task queued by an earlier run.
	seen := map[uint64]struct{}{}
	seed := maphash.MakeSeed()
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		res, err := q.Submit(ctx, chunk)
		if err != nil {
			return fmt.Errorf("queue tasks: %w", err)
		}
		for _, r := range res {
			h := maphash.String(seed, r.TaskID)
			_, repeated := seen[h]
			seen[h] = struct{}{}
			switch {
			case repeated:
				in.duplicateCount++
			case !r.IsDuplicate:
				in.newCount++
			}
		}
		in.taskCount += len(chunk)
		chunk = chunk[:0]
		return nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseCrawlLine(line)
		if err == nil {
			_, err = q.CheckTask(t) // as POST /v1/tasks: what B and C refuse included
		}
		if err != nil {
			in.invalidCount++
			if in.invalidCount <= maxInvalidLinesShown {
				fmt.Fprintf(w, "%s:%d: %s: %s\n", name, n, downloader.ErrorField(err), downloader.ErrorMessage(err))
			}
			continue
		}
		chunk = append(chunk, t)
		if len(chunk) == crawlSubmitChunk {
			if err := flush(); err != nil {
				return in, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return in, fmt.Errorf("read %s: %w", name, err)
	}
	if in.invalidCount > maxInvalidLinesShown {
		fmt.Fprintf(w, "%s: … and %d more invalid lines\n", name, in.invalidCount-maxInvalidLinesShown)
	}
	return in, flush()
}

// parseCrawlLine reads one line: a JSON object with task fields, or a bare URL.
func parseCrawlLine(line string) (downloader.Task, error) {
	if !strings.HasPrefix(line, "{") {
		return downloader.Task{URL: line, ShouldStore: true}, nil
	}
	var l crawlLine
	if err := httpjson.Unmarshal([]byte(line), &l); err != nil {
		return downloader.Task{}, err
	}
	return downloader.Task{TaskID: l.TaskID, URL: l.URL, Domain: l.Domain, MinIntervalMs: l.MinIntervalMs,
		ShouldRender: l.ShouldRender, ShouldStore: l.ShouldStore == nil || *l.ShouldStore}, nil
}

// waitCrawl shows progress until the queue has nothing pending or leased (false) or ctx
// ends (true). On a terminal it redraws a progress bar; otherwise it prints a line every
// plainEvery.
func waitCrawl(ctx context.Context, q *localqueue.Queue, tty bool, w io.Writer) (interrupted bool) {
	const (
		ttyEvery   = 200 * time.Millisecond
		plainEvery = 5 * time.Second
	)
	every := plainEvery
	if tty {
		every = ttyEvery
	}
	eta := &etaEstimator{}
	first := q.Counts()
	eta.observe(time.Now(), first.FinishedCount())
	tick := time.NewTicker(every)
	defer tick.Stop()
	// Finishing is checked more often than the progress is shown.
	check := time.NewTicker(20 * time.Millisecond)
	defer check.Stop()
	for {
		c := q.Counts()
		if c.PendingCount == 0 && c.LeasedCount == 0 {
			if tty {
				eta.observe(time.Now(), c.FinishedCount())
				fmt.Fprintf(w, "\r%s\n", progressLine(c, eta, true))
			}
			return false
		}
		select {
		case <-ctx.Done():
			if tty {
				fmt.Fprintln(w)
			}
			return true
		case now := <-tick.C:
			eta.observe(now, c.FinishedCount())
			if tty {
				fmt.Fprintf(w, "\r%s", progressLine(c, eta, true))
			} else {
				fmt.Fprintln(w, progressLine(c, eta, false))
			}
		case <-check.C:
		}
	}
}

// etaEstimator smooths the finishing rate exponentially over time (time constant etaTau),
// so that the ETA neither jumps with each burst of finished tasks nor sticks to the
// start's rate: a crawl slows down when only its slowest domains are left. Not safe for
// concurrent use; its zero value is ready.
type etaEstimator struct {
	lastAt   time.Time
	lastDone int
	rate     float64 // tasks per second, smoothed
	hasRate  bool
}

const etaTau = 20 * time.Second

// observe takes the count of finished tasks at now.
func (e *etaEstimator) observe(now time.Time, done int) {
	if e.lastAt.IsZero() {
		e.lastAt, e.lastDone = now, done
		return
	}
	dt := now.Sub(e.lastAt).Seconds()
	if dt <= 0 {
		return
	}
	inst := float64(done-e.lastDone) / dt
	if !e.hasRate {
		e.rate, e.hasRate = inst, true
	} else {
		w := 1 - math.Exp(-dt/etaTau.Seconds())
		e.rate += w * (inst - e.rate)
	}
	e.lastAt, e.lastDone = now, done
}

// eta is the time left for left tasks at the smoothed rate; ok is false while unknown.
func (e *etaEstimator) eta(left int) (time.Duration, bool) {
	if !e.hasRate || e.rate <= 1e-9 {
		return 0, false
	}
	return time.Duration(float64(left) / e.rate * float64(time.Second)), true
}

// progressLine renders the progress: a bar on a terminal, a plain line otherwise.
func progressLine(c localqueue.Counts, e *etaEstimator, bar bool) string {
	total := c.TotalCount()
	done := c.FinishedCount()
	failed := c.DoneCount - c.SucceededCount
	eta := "—"
	if left, ok := e.eta(total - done); ok {
		eta = left.Round(time.Second).String()
	}
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	skipped := ""
	if c.SkippedCount > 0 {
		skipped = fmt.Sprintf(", %d skipped by robots.txt", c.SkippedCount)
	}
	if !bar {
		return fmt.Sprintf("progress: %d/%d finished (%.1f%%), %d failed%s, %d leased, %.1f tasks/s, eta %s",
			done, total, pct, failed, skipped, c.LeasedCount, e.rate, eta)
	}
	const width = 30
	filled := int(pct / 100 * width)
	return fmt.Sprintf("[%s%s] %5.1f%% %d/%d · %d failed%s · %d leased · %.1f/s · eta %s ",
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), pct, done, total, failed, skipped, c.LeasedCount, e.rate, eta)
}

// printSummary writes the crawl's summary table.
func printSummary(w io.Writer, c localqueue.Counts, in crawlInput, elapsed time.Duration, p *wireLog, interrupted bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "crawl summary\t")
	fmt.Fprintf(tw, "  tasks\t%d\n", c.TotalCount())
	fmt.Fprintf(tw, "  done\t%d\n", c.DoneCount)
	fmt.Fprintf(tw, "    succeeded\t%d\n", c.SucceededCount)
	fmt.Fprintf(tw, "    failed\t%d\n", c.DoneCount-c.SucceededCount)
	reasons := make([]downloader.FailReason, 0, len(c.FailedCount))
	for r := range c.FailedCount {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool { return c.FailedCount[reasons[i]] > c.FailedCount[reasons[j]] })
	for _, r := range reasons {
		side := "reached the origin"
		if !r.HasReachedOrigin() {
			side = "our own (has_reached_origin=false)"
		}
		fmt.Fprintf(tw, "      %s\t%d\t%s\n", r, c.FailedCount[r], side)
	}
	if left := c.PendingCount + c.LeasedCount; left > 0 {
		note := ""
		if interrupted {
			note = "\tinterrupted: run the same command again to resume"
		}
		fmt.Fprintf(tw, "  not done yet\t%d%s\n", left, note)
	}
	fmt.Fprintf(tw, "  pages stored\t%d\n", c.PageCount)
	printQueueExtras(tw, c)
	if in.invalidCount > 0 {
		fmt.Fprintf(tw, "  invalid lines\t%d\tnot crawled\n", in.invalidCount)
	}
	fmt.Fprintf(tw, "  elapsed\t%s\n", elapsed.Round(10*time.Millisecond))
	_ = tw.Flush()
	if p != nil {
		printPoliteness(w, p.rows())
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

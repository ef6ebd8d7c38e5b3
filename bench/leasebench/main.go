// Command leasebench measures entry A (the lease loop over the embedded local queue, the
// limiter, the real fetcher and store) against a Colly crawler on the same workloads, with
// a real multi-host origin on 127.0.0.1 (package origintest, kernel receive timestamps):
//
//   - polite utilisation: H hosts × P pages, interval I, origin latency L. Ideal makespan
//     (P−1)×I + L (every host asked exactly every I, the last page answered after L);
//     reported: makespan ÷ ideal and the politeness violations the origin saw.
//   - plain throughput: many hosts, interval 0: pages per second.
//
// It lives in its own module (bench/go.mod) so that the downloader does not depend on
// Colly. Run it with scripts/bench.sh.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocolly/colly/v2"

	"downloader"
	"downloader/clock"
	"downloader/engine"
	"downloader/fetch"
	"downloader/htmltext"
	"downloader/lease"
	"downloader/limiter"
	"downloader/localqueue"
	"downloader/netguard"
	"downloader/origintest"
	"downloader/outbox"
	"downloader/store/embedded"
)

func main() {
	var (
		hosts      = flag.Int("host-count", 50, "polite workload: hosts")
		pages      = flag.Int("page-count", 20, "polite workload: pages per host")
		intervalMs = flag.Int("min-interval-ms", 100, "polite workload: min interval per host")
		latencyMs  = flag.Int("latency-ms", 20, "origin latency (every workload)")
		runs       = flag.Int("run-count", 3, "runs of each row, alternating between the rows (the median is reported)")
		tHosts     = flag.Int("throughput-host-count", 200, "throughput workload: hosts")
		tPages     = flag.Int("throughput-page-count", 25, "throughput workload: pages per host")
		concurrent = flag.Int("max-concurrent-count", 64, "requests in flight (max_concurrent_count; Colly's Parallelism)")
	)
	var opt options
	flag.StringVar(&opt.only, "only", "", "run only this part: polite-a (entry A's polite row only, for profiles), polite-c (Colly's polite rows only), polite, throughput, probe, probe-c, cpu, cpu-a (entry A's rows only, for profiles), cpu-c (Colly's rows only, for profiles), rss")
	flag.IntVar(&opt.rssTasks, "rss-task-count", 100000, "memory workload: tasks queued")
	flag.IntVar(&opt.rssHosts, "rss-host-count", 10000, "memory workload: hosts they are spread over")
	flag.IntVar(&opt.probeDomains, "probe-domain-count", 10000, "probe workload: domains, one probe each")
	flag.IntVar(&opt.heldPerSlot, "held-per-slot-count", 4, "entry A holds up to this many tasks per global slot (as serve does)")
	flag.BoolVar(&opt.noStore, "is-store-off", false, "polite workload with should_store=false")
	var prof profiles
	flag.StringVar(&prof.cpu, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&prof.block, "blockprofile", "", "write a blocking profile (every blocking event) to this file")
	flag.StringVar(&prof.mutex, "mutexprofile", "", "write a mutex contention profile (every event) to this file")
	flag.StringVar(&prof.mem, "memprofile", "", "write an allocation profile (allocs, every 4 KiB sampled) to this file")
	flag.StringVar(&prof.trace, "trace", "", "write an execution trace of the whole run to this file (go tool trace; go tool trace -pprof=sched F for where goroutines waited to run)")
	flag.Parse()
	stopProf, err := prof.start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasebench:", err)
		os.Exit(1)
	}
	err = run(opt, *hosts, *pages, time.Duration(*intervalMs)*time.Millisecond, time.Duration(*latencyMs)*time.Millisecond, *runs, *tHosts, *tPages, *concurrent)
	if perr := stopProf(); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasebench:", err)
		os.Exit(1)
	}
}

// workload is one set of pages to fetch.
type workload struct {
	hosts, pages int
	interval     time.Duration
	latency      time.Duration
	shouldStore  bool
}

func (w workload) urls() []string {
	var out []string
	for p := range w.pages {
		for h := range w.hosts {
			out = append(out, fmt.Sprintf("http://h%03d.bench.test/p%d", h, p))
		}
	}
	return out
}

func (w workload) ideal() time.Duration {
	return time.Duration(w.pages-1)*w.interval + w.latency
}

// result is one measured run.
type result struct {
	name       string
	pageCount  int
	total      time.Duration // from the start of the crawl to the last page done
	wire       time.Duration // from the first request at the origin to the last response sent
	violations int
	minGap     time.Duration
	failed     int
	cpu        time.Duration // process CPU time (user + system, origin included) during the crawl
	dials      int64         // connections the crawler dialled (a page on a reused one dials none)
	load       float64       // the machine's 1-minute load average at the end of the run
}

// slowOrigin is an origin that answers after latency and records when each answer was
// sent.
type slowOrigin struct {
	*origintest.Origin
	mu      sync.Mutex
	lastEnd time.Time
}

func newOrigin(latency time.Duration) *slowOrigin {
	o := &slowOrigin{}
	o.Origin = origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if latency > 0 {
			t := time.NewTimer(latency)
			<-t.C
		}
		origintest.Page(w, r)
		now := time.Now()
		o.mu.Lock()
		if now.After(o.lastEnd) {
			o.lastEnd = now
		}
		o.mu.Unlock()
	}))
	return o
}

// measure fills the origin-side numbers of r.
func (o *slowOrigin) measure(r *result, interval time.Duration) {
	arr := o.Arrivals()
	r.pageCount = len(arr)
	if len(arr) == 0 {
		return
	}
	first := arr[0].At
	for _, a := range arr {
		if a.At.Before(first) {
			first = a.At
		}
	}
	o.mu.Lock()
	r.wire = o.lastEnd.Sub(first)
	o.mu.Unlock()
	if interval > 0 {
		vs := o.Violations(func(string) (time.Duration, bool) { return interval, true }, 0)
		r.violations = len(vs)
		for i, v := range vs {
			if i < 5 && os.Getenv("LEASEBENCH_DEBUG") != "" {
				fmt.Fprintln(os.Stderr, "violation:", v)
			}
		}
		if os.Getenv("LEASEBENCH_DEBUG") != "" {
			var over []time.Duration
			byHost := map[string][]time.Time{}
			for _, a := range arr {
				byHost[a.Host] = append(byHost[a.Host], a.At)
			}
			for _, ts := range byHost {
				sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
				for i := 1; i < len(ts); i++ {
					over = append(over, ts[i].Sub(ts[i-1])-interval)
				}
			}
			sort.Slice(over, func(i, j int) bool { return over[i] < over[j] })
			n := len(over)
			fmt.Fprintf(os.Stderr, "gap-interval: min %v p50 %v p90 %v p99 %v max %v\n", over[0], over[n/2], over[n*9/10], over[n*99/100], over[n-1])
			firsts := []time.Duration{}
			for _, ts := range byHost {
				firsts = append(firsts, ts[0].Sub(first))
			}
			sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
			fmt.Fprintf(os.Stderr, "first request per host after the first: p50 %v max %v\n", firsts[len(firsts)/2], firsts[len(firsts)-1])
		}
	}
	r.minGap = -1
	for _, g := range o.MinGaps() {
		if r.minGap < 0 || g < r.minGap {
			r.minGap = g
		}
	}
}

// runEntryA crawls w through entry A: the local queue, the lease loop, the engine with
// the limiter, the global cap, the guarded fetcher and the embedded store.
func runEntryA(w workload, maxConcurrent, heldPerSlot int) (result, error) {
	res := result{name: "downloader entry A"}
	o := newOrigin(w.latency)
	defer o.Close()
	dir, err := os.MkdirTemp("", "leasebench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	st, err := embedded.Open(filepath.Join(dir, "store"), nil)
	if err != nil {
		return res, err
	}
	defer st.Close()
	ctx := context.Background()
	clk := clock.Real{}
	q, err := localqueue.Open(ctx, st, localqueue.Config{Clock: clk})
	if err != nil {
		return res, err
	}
	rule, err := netguard.ParseConnectTo(o.ConnectTo())
	if err != nil {
		return res, err
	}
	wr := &writeRecorder{at: map[string][]time.Time{}}
	guard := netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}, Dialer: wr})
	defer wr.print(w.interval)
	lim := limiter.New(clk)
	gate := limiter.NewGate(maxConcurrent, 256)
	f := fetch.New(fetch.Config{Clock: clk, Guard: guard})
	defer f.Close()
	obs := &lateness{slots: map[string]time.Time{}}
	eng := engine.New(engine.Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: f, Results: st, Pages: st,
		DefaultMinInterval: time.Second, DefaultTimeout: 30 * time.Second, Observer: obs})
	defer obs.print()

	iv := w.interval.Milliseconds()
	var tasks []downloader.Task
	for _, u := range w.urls() {
		tasks = append(tasks, downloader.Task{URL: u, MinIntervalMs: &iv, ShouldStore: w.shouldStore})
	}
	for i := 0; i < len(tasks); i += localqueue.MaxSubmitCount {
		if _, err := q.Submit(ctx, tasks[i:min(i+localqueue.MaxSubmitCount, len(tasks))]); err != nil {
			return res, err
		}
	}
	dc := &doneCommitter{Queue: q, n: int64(len(tasks)), done: make(chan struct{}, 1)}
	loop, err := lease.New(lease.Config{Source: q, Committer: dc, Runner: eng, Outbox: outbox.New(st), Clock: clk,
		Logger:       slog.New(slog.DiscardHandler),
		MaxHeldCount: func() int { return heldPerSlot * gate.Capacity() }, MaxLeaseCount: 100, PollMax: 50 * time.Millisecond})
	if err != nil {
		return res, err
	}
	// A new limiter treats every domain as asked at its creation (conservative rebuild):
	// start once that interval has passed, as a running service would have.
	waitUntil(time.Now().Add(w.interval))

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	start, cpu0, wal0 := time.Now(), processCPU(), st.WALBytesIn()
	go func() { done <- loop.Run(runCtx) }()
	for q.Counts().DoneCount < len(tasks) {
		<-dc.done
	}
	res.total, res.cpu = time.Since(start), processCPU()-cpu0
	wal := st.WALBytesIn() - wal0
	stop()
	if err := <-done; err != nil {
		return res, err
	}
	c := q.Counts()
	fmt.Fprintf(os.Stderr, "entry A, should_store=%t: %d B of write-ahead log per task end\n", w.shouldStore, wal/uint64(max(c.DoneCount, 1)))
	res.failed = c.DoneCount - c.SucceededCount
	res.dials = wr.dials.Load()
	o.measure(&res, w.interval)
	return res, nil
}

// doneCommitter is the local queue's commit of a task's end that wakes the benchmark
// once as many ends as it submitted tasks have been committed (and at every commit after
// that), so that it reads the queue's counts then instead of polling them every 500 µs
// while the crawl runs: each poll took the queue's lock and copied its counts, CPU the row
// charged to entry A (Colly's rows wait on a WaitGroup).
type doneCommitter struct {
	*localqueue.Queue
	n     int64
	count atomic.Int64
	done  chan struct{} // buffered: one wake-up waits
}

func (c *doneCommitter) CommitTask(ctx context.Context, end *downloader.TaskEnd) error {
	err := c.Queue.CommitTask(ctx, end)
	if c.count.Add(1) >= c.n {
		select {
		case c.done <- struct{}{}:
		default:
		}
	}
	return err
}

// runColly crawls w with a Colly collector: asynchronous, one limit rule per host with
// Parallelism 1 and Delay delay (Colly sleeps Delay after each response before the host's
// next request), or, with interval 0, one rule for every host with Parallelism
// maxConcurrent.
func runColly(w workload, delay time.Duration, maxConcurrent int, name string) (result, error) {
	return runCollyWith(w, delay, maxConcurrent, name, nil)
}

// runCollyWith is runColly with setup applied to the collector before the crawl.
func runCollyWith(w workload, delay time.Duration, maxConcurrent int, name string, setup func(*colly.Collector)) (result, error) {
	res := result{name: name}
	o := newOrigin(w.latency)
	defer o.Close()
	target := o.Addr()
	var dials atomic.Int64
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, target)
		},
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second,
	}
	defer tr.CloseIdleConnections()
	c := colly.NewCollector(colly.Async(true))
	c.WithTransport(tr)
	if w.interval > 0 {
		for h := range w.hosts {
			if err := c.Limit(&colly.LimitRule{DomainGlob: fmt.Sprintf("h%03d.bench.test", h), Parallelism: 1, Delay: delay}); err != nil {
				return res, err
			}
		}
	} else if err := c.Limit(&colly.LimitRule{DomainGlob: "*", Parallelism: maxConcurrent}); err != nil {
		return res, err
	}
	if setup != nil {
		setup(c)
	}
	var failed atomic.Int64
	c.OnError(func(*colly.Response, error) { failed.Add(1) })
	start, cpu0 := time.Now(), processCPU()
	for _, u := range w.urls() {
		if err := c.Visit(u); err != nil {
			return res, err
		}
	}
	c.Wait()
	res.total, res.cpu = time.Since(start), processCPU()-cpu0
	res.failed = int(failed.Load())
	res.dials = dials.Load()
	o.measure(&res, w.interval)
	return res, nil
}

// runCollyText is runColly with a visible-text extraction of every page
// (htmltext.Text), the work entry A does for each page and Colly does not.
func runCollyText(w workload, maxConcurrent int) (result, error) {
	return runCollyWith(w, 0, maxConcurrent, "Colly + text", func(c *colly.Collector) {
		c.OnResponse(func(r *colly.Response) { _ = htmltext.Text(r.Body, r.Headers.Get("Content-Type")) })
	})
}

// lateness records, with LEASEBENCH_DEBUG set, how late each entry A task started after
// its reserved slot.
type lateness struct {
	mu    sync.Mutex
	slots map[string]time.Time
	late  []time.Duration
}

func (l *lateness) Observe(ev *downloader.Event) {
	if ev.Entry != downloader.EntryLease {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ev.OverLimit || ev.Paced {
		l.slots[ev.TaskID] = ev.At.Add(ev.Delay)
		return
	}
	if slot, ok := l.slots[ev.TaskID]; ok {
		l.late = append(l.late, ev.At.Sub(slot))
	}
}

func (l *lateness) print() {
	if os.Getenv("LEASEBENCH_DEBUG") == "" || len(l.late) == 0 {
		return
	}
	sort.Slice(l.late, func(i, j int) bool { return l.late[i] < l.late[j] })
	n := len(l.late)
	fmt.Fprintf(os.Stderr, "start - slot (delayed tasks): p50 %v p90 %v p99 %v max %v\n", l.late[n/2], l.late[n*9/10], l.late[n*99/100], l.late[n-1])
}

// writeRecorder (LEASEBENCH_DEBUG) records when each request's bytes were handed to the
// kernel (right after the write returned), per Host.
type writeRecorder struct {
	dials atomic.Int64 // every dial, debug or not
	mu    sync.Mutex
	at    map[string][]time.Time
}

func (r *writeRecorder) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	r.dials.Add(1)
	var d net.Dialer
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &recConn{Conn: c, r: r}, nil
}

type recConn struct {
	net.Conn
	r *writeRecorder
}

func (c *recConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if bytes.HasPrefix(b, []byte("GET ")) {
		if i := bytes.Index(b, []byte("\r\nHost: ")); i >= 0 {
			rest := b[i+8:]
			if j := bytes.IndexByte(rest, '\r'); j >= 0 {
				now := time.Now()
				c.r.mu.Lock()
				c.r.at[string(rest[:j])] = append(c.r.at[string(rest[:j])], now)
				c.r.mu.Unlock()
			}
		}
	}
	return n, err
}

func (r *writeRecorder) print(interval time.Duration) {
	if os.Getenv("LEASEBENCH_DEBUG") == "" || interval == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	below, minGap := 0, time.Hour
	for _, ts := range r.at {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		for i := 1; i < len(ts); i++ {
			g := ts[i].Sub(ts[i-1])
			minGap = min(minGap, g)
			if g < interval {
				below++
			}
		}
	}
	fmt.Fprintf(os.Stderr, "client write-return gaps: %d below the interval, min %v\n", below, minGap)
}

// waitUntil blocks until t.
func waitUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		tm := time.NewTimer(d)
		<-tm.C
	}
}

// options are the knobs beyond the workload's shape.
type options struct {
	only        string // run only this part
	heldPerSlot int    // entry A holds up to this many tasks per global slot
	noStore     bool   // polite workload with should_store=false
	// probeDomains is the probe workload's size: one entry C probe per domain.
	probeDomains int
	// rssTasks tasks over rssHosts hosts: the memory workload.
	rssTasks, rssHosts int
}

func run(opt options, hosts, pages int, interval, latency time.Duration, runs, tHosts, tPages, concurrent int) error {
	out := os.Stdout
	polite := workload{hosts: hosts, pages: pages, interval: interval, latency: latency, shouldStore: !opt.noStore}
	ideal := polite.ideal()
	variants := []row{
		{"downloader entry A (should_store, durable)", func() (result, error) { return runEntryA(polite, concurrent, opt.heldPerSlot) }},
		{fmt.Sprintf("Colly, Delay = interval (%v)", interval), func() (result, error) {
			return runColly(polite, interval, concurrent, "")
		}},
		{fmt.Sprintf("Colly, Delay = interval − latency (%v)", interval-latency), func() (result, error) {
			return runColly(polite, interval-latency, concurrent, "")
		}},
	}
	switch opt.only {
	case "polite-a":
		variants = variants[:1]
	case "polite-c":
		variants = variants[1:]
	}
	if opt.only != "" && !strings.HasPrefix(opt.only, "polite") {
		variants = nil
	}
	if len(variants) > 0 {
		fmt.Fprintf(out, "## Polite utilisation: %d hosts × %d pages, interval %v, origin latency %v\n\n", hosts, pages, interval, latency)
		fmt.Fprintf(out, "Ideal makespan (pages−1)×interval + latency = %v. Median of %d runs, the rows alternating. %s\n\n", ideal, runs, machineLine())
		fmt.Fprintln(out, "| crawler | pages | makespan (start → last done) | ÷ ideal | wire makespan (first request → last response) | ÷ ideal | violations at the origin | min gap | failed | process CPU per page | load (1 min) |")
		fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|---|")
	}
	politeRuns, err := measureRows(variants, runs)
	if err != nil {
		return err
	}
	for i, v := range variants {
		rs := politeRuns[i]
		m := medianBy(rs, byTotal)
		fmt.Fprintf(out, "| %s | %d | %v | %.3f | %v | %.3f | %d | %v | %d | %.2f ms | %s |\n", v.name, m.pageCount,
			m.total.Round(time.Millisecond), float64(m.total)/float64(ideal), m.wire.Round(time.Millisecond),
			float64(m.wire)/float64(ideal), m.violations, m.minGap.Round(10*time.Microsecond), m.failed, cpuPerPage(m), loadRange(rs))
		var all []string
		for _, r := range rs {
			all = append(all, fmt.Sprintf("%.3f/%.3f/%d/%.2fms/%d", float64(r.total)/float64(ideal), float64(r.wire)/float64(ideal), r.violations, cpuPerPage(r), r.dials))
		}
		fmt.Fprintf(os.Stderr, "%s: runs (total÷ideal / wire÷ideal / violations / CPU per page / dials): %s\n", v.name, strings.Join(all, "  "))
	}
	if len(variants) == 3 {
		// The target: entry A's makespan no longer than Colly's best polite setting's.
		a := medianBy(politeRuns[0], byTotal).total
		best := min(medianBy(politeRuns[1], byTotal).total, medianBy(politeRuns[2], byTotal).total)
		fmt.Fprintf(out, "\nEntry A's makespan ÷ Colly's best (medians, same run): %.2f×.\n", float64(a)/float64(best))
	}

	if strings.HasPrefix(opt.only, "polite") {
		return nil
	}
	if strings.HasPrefix(opt.only, "probe") {
		return runProbeTable(opt, latency, concurrent, runs)
	}
	if part, ok := strings.CutPrefix(opt.only, "cpu"); ok && (part == "" || part == "-a" || part == "-c") {
		return runCPUTable(tHosts, tPages, latency, concurrent, opt.heldPerSlot, strings.TrimPrefix(part, "-"), runs)
	}
	if opt.only == "rss" {
		return runRSSTable(opt.rssTasks, opt.rssHosts)
	}
	fmt.Fprintf(out, "\n## Plain throughput: %d hosts × %d pages, interval 0, origin latency %v, %d in flight\n\n", tHosts, tPages, latency, concurrent)
	fmt.Fprintf(out, "Median of %d runs, the rows alternating (entry A, Colly, entry A stored); ÷ Colly from the medians. %s\n\n", runs, machineLine())
	fmt.Fprintln(out, "| crawler | pages | elapsed | pages/s | ÷ Colly | failed | process CPU per page | load (1 min) |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|")
	rows := []row{
		{"downloader entry A, should_store=false", func() (result, error) {
			return runEntryA(workload{hosts: tHosts, pages: tPages, latency: latency}, concurrent, opt.heldPerSlot)
		}},
		{fmt.Sprintf("Colly, Parallelism %d", concurrent), func() (result, error) {
			return runColly(workload{hosts: tHosts, pages: tPages, latency: latency}, 0, concurrent, "")
		}},
		{"downloader entry A, should_store=true (pages and results durable)", func() (result, error) {
			return runEntryA(workload{hosts: tHosts, pages: tPages, latency: latency, shouldStore: true}, concurrent, opt.heldPerSlot)
		}},
	}
	tRuns, err := measureRows(rows, runs)
	if err != nil {
		return err
	}
	pagesPerSecond := func(r result) float64 { return float64(r.pageCount) / r.total.Seconds() }
	colly := pagesPerSecond(medianBy(tRuns[1], byTotal))
	for i, tc := range rows {
		r := medianBy(tRuns[i], byTotal)
		fmt.Fprintf(out, "| %s | %d | %v | %.0f | %.2f× | %d | %.2f ms | %s |\n", tc.name, r.pageCount, r.total.Round(time.Millisecond),
			pagesPerSecond(r), pagesPerSecond(r)/colly, r.failed, cpuPerPage(r), loadRange(tRuns[i]))
		var all []string
		for _, x := range tRuns[i] {
			all = append(all, fmt.Sprintf("%.0f/%.2fms", pagesPerSecond(x), cpuPerPage(x)))
		}
		fmt.Fprintf(os.Stderr, "%s: runs (pages/s / CPU per page): %s\n", tc.name, strings.Join(all, "  "))
	}
	if opt.only == "throughput" {
		return nil
	}
	if err := runProbeTable(opt, latency, concurrent, runs); err != nil {
		return err
	}
	if err := runCPUTable(tHosts, tPages, latency, concurrent, opt.heldPerSlot, "", runs); err != nil {
		return err
	}
	return runRSSTable(opt.rssTasks, opt.rssHosts)
}

// runProbeTable prints entry C's probes over many domains beside a bare client.
func runProbeTable(opt options, latency time.Duration, concurrent, runs int) error {
	out := os.Stdout
	fmt.Fprintf(out, "\n## Probes (entry C): %d domains, one GET each, origin latency %v, %d in flight\n\n", opt.probeDomains, latency, concurrent)
	fmt.Fprintf(out, "Median of %d runs, the rows alternating. %s\n\n", runs, machineLine())
	fmt.Fprintln(out, "| client | probes | elapsed | probes/s | failed | process CPU per probe | load (1 min) |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|")
	rows := []row{
		{"downloader entry C", func() (result, error) { return runProbes(opt.probeDomains, concurrent, latency) }},
		{"bare net/http client", func() (result, error) { return runBare(opt.probeDomains, concurrent, latency) }},
	}
	if opt.only == "probe-c" {
		rows = rows[:1]
	}
	rs, err := measureRows(rows, runs)
	if err != nil {
		return err
	}
	for i := range rows {
		r := medianBy(rs[i], byTotal)
		fmt.Fprintf(out, "| %s | %d | %v | %.0f | %d | %.2f ms | %s |\n", r.name, r.pageCount, r.total.Round(time.Millisecond),
			float64(r.pageCount)/r.total.Seconds(), r.failed, cpuPerPage(r), loadRange(rs[i]))
	}
	return nil
}

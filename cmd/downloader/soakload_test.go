package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"downloader"
	"downloader/internal/procstat"
	"downloader/localqueue"
	"downloader/netguard"
	"downloader/origintest"
)

// The soak lives in the test binary, not in the service: it needs a test origin
// (origintest) and drives the service's own parts in this process (the local queue's
// counts, the renderer's, the browser to kill), which a second command could reach only
// by starting the service out of process. See docs/reliability.md §8 for how to run it.

const soakUsage = `usage: go test -v -run '^TestSoak$' -timeout 0 ./cmd/downloader -args -- soak [flags]

Runs the whole service in this process for a bounded time under mixed load against local
origins on 127.0.0.1 (many virtual hosts on one listener): entry A through the local queue
(POST /v1/tasks), entry B (POST /v1/render, half of them rendered) and entry C
(POST /v1/probe), and kills the browser once every --kill-after-render-count renders. It samples the
process's RSS, goroutines and file descriptors (and the browser's processes and RSS) over
time, then stops the load, lets the queue drain, stops the service and reports:

  violations   two requests to one host closer than its interval, measured at the origin
  lost tasks   tasks submitted but not done after the drain
  flatness     RSS, goroutines and fds at the end against after the warm-up

Exit status 0 when violations and lost tasks are 0 and every resource is flat; 1 otherwise.
Nothing leaves the machine: every host is sent to the local origin by --connect-to.

Flags (the soak's own, then every flag of serve):

`

// soakConfig is the soak's own flags.
type soakConfig struct {
	DurationSeconds      int
	SampleSeconds        int
	WarmupSeconds        int
	DrainSeconds         int
	DomainCount          int
	TasksPerSecond       float64 // entry A
	RendersPerSecond     float64 // entry B
	ProbesPerSecond      float64 // entry C
	KillEvery            int     // renders between browser kills
	TaskRenderPercent    int     // of entry A's tasks, rendered
	MaxLoadInFlightCount int
}

// soakIntervals are the hosts' intervals, one class per host in turn.
var soakIntervals = []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second}

// assetsHost serves the rendered pages' XHRs. Sub-requests of a render are the browser's,
// not the limiter's (only the main document is admitted), so it is left out of the
// politeness check.
const assetsHost = "assets.test"

func runSoak(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	var sc soakConfig
	c.LogLevel = slog.LevelWarn
	fs := newFlagSet("soak", &c, stderr)
	c.Listen = "127.0.0.1:0"
	fs.Lookup("listen").DefValue = c.Listen
	fs.Lookup("log-level").DefValue = "warn"
	fs.Lookup("data-dir").DefValue = "(a temporary directory, removed at the end)"
	tmpDir, err := os.MkdirTemp("", "downloader-soak-")
	if err != nil {
		return fmt.Errorf("soak: data dir: %w", err)
	}
	defer os.RemoveAll(tmpDir) // unused when --data-dir is given
	c.DataDir = tmpDir
	fs.IntVar(&sc.DurationSeconds, "duration-seconds", 600, "how long the load runs")
	fs.IntVar(&sc.SampleSeconds, "sample-seconds", 10, "how often RSS, goroutines and fds are sampled")
	fs.IntVar(&sc.WarmupSeconds, "warmup-seconds", 0, "samples before this are not the baseline of the flatness check (default: a tenth of the duration, at least one sample)")
	fs.IntVar(&sc.DrainSeconds, "drain-seconds", 120, "how long the queue may take to drain after the load")
	fs.IntVar(&sc.DomainCount, "domain-count", 100, "virtual hosts of the origin")
	fs.Float64Var(&sc.TasksPerSecond, "tasks-per-second", 20, "entry A: tasks submitted to the local queue")
	fs.Float64Var(&sc.RendersPerSecond, "renders-per-second", 1, "entry B: POST /v1/render calls (half with should_render)")
	fs.Float64Var(&sc.ProbesPerSecond, "probes-per-second", 10, "entry C: POST /v1/probe calls")
	fs.IntVar(&sc.KillEvery, "kill-after-render-count", 100, "kill the browser once every this many renders (0: never)")
	fs.IntVar(&sc.TaskRenderPercent, "task-render-percent", 2, "entry A's tasks with should_render")
	fs.IntVar(&sc.MaxLoadInFlightCount, "max-load-in-flight-count", 64, "B and C calls the load keeps in flight at most")
	fs.Usage = func() {
		fmt.Fprint(stderr, soakUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, &c, args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	switch {
	case sc.DurationSeconds < 1, sc.SampleSeconds < 1, sc.DrainSeconds < 0, sc.DomainCount < 1,
		sc.TasksPerSecond < 0, sc.RendersPerSecond < 0, sc.ProbesPerSecond < 0, sc.KillEvery < 0,
		sc.TaskRenderPercent < 0 || sc.TaskRenderPercent > 100, sc.MaxLoadInFlightCount < 1:
		return errors.New("soak: a flag is out of range (see --help)")
	}
	if sc.WarmupSeconds <= 0 {
		sc.WarmupSeconds = max(sc.DurationSeconds/10, sc.SampleSeconds)
	}
	s := newSoak(&c, sc, stdout)
	return s.run(ctx, stderr)
}

// soak is one soak run.
type soak struct {
	cfg    *config
	sc     soakConfig
	out    io.Writer
	origin *origintest.Origin
	svc    *service
	client *http.Client
	hosts  []string
	rng    *lockedRand

	submitted                                            atomic.Int64
	taskSeq                                              atomic.Int64
	bCount, b429Count, bFailCount, cCount, cOwnCount     atomic.Int64
	skippedCount, loadErrCount, renderCount, killedCount atomic.Int64
	reasonMu                                             sync.Mutex
	reasons                                              map[string]int // entry/fail_reason → count

	samples         []soakSample
	goroutinesAtEnd []goroutineGroup
	stacksAtDrain   string // every goroutine's stack after the drain, when a task was not done
}

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

// soakSample is one sample of the process.
type soakSample struct {
	At               time.Duration
	RSSBytes         int64
	BrowserRSSBytes  int64
	GoroutineCount   int
	FDCount          int
	BrowserProcCount int
	DoneCount        int
	BacklogCount     int // entry A tasks pending or leased
	RenderedCount    int64
	KilledCount      int64
}

func newSoak(c *config, sc soakConfig, out io.Writer) *soak {
	s := &soak{cfg: c, sc: sc, out: out, reasons: map[string]int{},
		rng: &lockedRand{r: rand.New(rand.NewPCG(1, 2))}}
	for i := range sc.DomainCount {
		s.hosts = append(s.hosts, fmt.Sprintf("s%03d.test", i))
	}
	return s
}

func (s *soak) intervalOf(host string) (time.Duration, bool) {
	var i int
	if _, err := fmt.Sscanf(host, "s%03d.test", &i); err != nil || i >= len(s.hosts) {
		return 0, false
	}
	return soakIntervals[i%len(soakIntervals)], true
}

func (s *soak) run(ctx context.Context, stderr io.Writer) error {
	s.origin = origintest.New(http.HandlerFunc(s.serveOrigin))
	defer s.origin.Close()
	rule, err := netguard.ParseConnectTo(s.origin.ConnectTo())
	if err != nil {
		return err
	}
	s.cfg.ConnectTo = append(s.cfg.ConnectTo, rule)
	logger := newLogger(stderr, s.cfg.LogLevel)
	svcCtx, stopSvc := context.WithCancel(context.Background())
	defer stopSvc()
	s.svc, err = startService(svcCtx, s.cfg, logger)
	if err != nil {
		return err
	}
	svcDone := make(chan error, 1)
	go func() { svcDone <- s.svc.wait(svcCtx) }()
	if s.svc.entryA.queue == nil {
		stopSvc()
		<-svcDone
		return errors.New("soak: entry A must use the local queue (no --scheduler-url)")
	}
	tr := &http.Transport{MaxIdleConnsPerHost: s.sc.MaxLoadInFlightCount}
	s.client = &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	defer tr.CloseIdleConnections()
	base := "http://" + s.svc.addr.String()
	fmt.Fprintf(s.out, "soak: %ds of load on %s (data dir %s), origin %s, %d hosts; A %.0f/s (%d%% rendered), B %.0f/s (half rendered), C %.0f/s; browser killed every %d renders\n",
		s.sc.DurationSeconds, base, s.cfg.DataDir, s.origin.Addr(), len(s.hosts), s.sc.TasksPerSecond, s.sc.TaskRenderPercent,
		s.sc.RendersPerSecond, s.sc.ProbesPerSecond, s.sc.KillEvery)

	start := time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, time.Duration(s.sc.DurationSeconds)*time.Second)
	defer stopLoad()
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.sc.MaxLoadInFlightCount)
	wg.Go(func() { s.loadA(loadCtx, base) })
	wg.Go(func() { s.loadBC(loadCtx, base, "/v1/render", s.sc.RendersPerSecond, sem, &wg) })
	wg.Go(func() { s.loadBC(loadCtx, base, "/v1/probe", s.sc.ProbesPerSecond, sem, &wg) })
	// The killer counts renders, not seconds: it runs through the drain too, so that a
	// slow machine, which renders fewer pages during the load, still meets its kill.
	killCtx, stopKiller := context.WithCancel(ctx)
	var killerDone sync.WaitGroup
	killerDone.Go(func() { s.killer(killCtx) })
	s.sampleLoop(loadCtx, start)
	s.goroutinesAtEnd = goroutineGroups(8)
	wg.Wait()
	interrupted := ctx.Err() != nil

	// Drain: every submitted task must end done.
	fmt.Fprintf(s.out, "soak: load stopped after %v; draining the queue (at most %ds)\n", time.Since(start).Round(time.Second), s.sc.DrainSeconds)
	q := s.svc.entryA.queue
	drainEnd := time.Now().Add(time.Duration(s.sc.DrainSeconds) * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	for !interrupted {
		c := q.Counts()
		if c.PendingCount+c.LeasedCount == 0 || time.Now().After(drainEnd) {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			interrupted = true
		}
	}
	tick.Stop()
	stopKiller()
	killerDone.Wait()
	s.sample(start) // the last sample, after the drain
	counts := q.Counts()
	// The tasks not done, as the task API shows them, and where every goroutine stands:
	// what a lost task was waiting for.
	leftCount := 0
	for _, state := range []downloader.TaskState{downloader.TaskQueued, downloader.TaskLeased} {
		left, _, err := q.ListTasks(context.Background(), state, "", 20)
		if err != nil {
			fmt.Fprintf(s.out, "soak: list %s tasks: %v\n", state, err)
		}
		for _, st := range left {
			b, _ := json.Marshal(st)
			fmt.Fprintf(s.out, "soak: not done after the drain: %s\n", b)
		}
		leftCount += len(left)
	}
	if leftCount > 0 {
		s.stacksAtDrain = allStacks()
	}
	var doneIDs int
	if err := q.RangeDone(context.Background(), func(t *downloader.Task, r *downloader.Report) bool {
		if strings.HasPrefix(t.TaskID, "soak-") && r != nil {
			doneIDs++
		}
		return true
	}); err != nil {
		fmt.Fprintf(s.out, "soak: list done tasks: %v\n", err)
	}
	stopSvc()
	if err := <-svcDone; err != nil {
		return fmt.Errorf("soak: the service stopped with an error: %w", err)
	}
	return s.report(counts, doneIDs, interrupted)
}

// serveOrigin answers the soak's hosts: a small page (a JavaScript page whose text comes
// from an XHR when the path says /r/), and the XHR's JSON on assets.test.
func (s *soak) serveOrigin(w http.ResponseWriter, r *http.Request) {
	host := strings.Split(r.Host, ":")[0]
	if host == assetsHost {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"paragraphs":["A paragraph that only the script puts on the page, long enough to count.","And a second one."]}`)
		return
	}
	// A little service time, as a real origin has.
	t := time.NewTimer(time.Duration(5+s.rng.IntN(30)) * time.Millisecond)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if strings.Contains(r.URL.Path, "/r/") {
		fmt.Fprintf(w, `<!doctype html><html><head><title>%s</title></head><body><h1>Rendered page of %s</h1><div id="x"></div>
<script>fetch("http://%s/data.json?p=%s").then(r => r.json()).then(d => {
  for (const p of d.paragraphs) { const e = document.createElement("p"); e.textContent = p; document.getElementById("x").appendChild(e); }
});</script></body></html>`, host, host, assetsHost, r.URL.Path)
		return
	}
	origintest.Page(w, r)
}

// loadA submits entry A's tasks to the local queue through POST /v1/tasks, in batches four
// times a second.
func (s *soak) loadA(ctx context.Context, base string) {
	if s.sc.TasksPerSecond <= 0 {
		return
	}
	const every = 250 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	owed := 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		owed += s.sc.TasksPerSecond * every.Seconds()
		n := int(owed)
		owed -= float64(n)
		if n == 0 {
			continue
		}
		tasks := make([]map[string]any, 0, n)
		for range n {
			seq := s.taskSeq.Add(1)
			host := s.hosts[s.rng.IntN(len(s.hosts))]
			iv, _ := s.intervalOf(host)
			path := fmt.Sprintf("/a/%d", seq)
			render := s.rng.IntN(100) < s.sc.TaskRenderPercent
			if render {
				path = fmt.Sprintf("/a/r/%d", seq)
			}
			tasks = append(tasks, map[string]any{"task_id": fmt.Sprintf("soak-%d", seq), "url": "http://" + host + path,
				"min_interval_ms": iv.Milliseconds(), "should_render": render, "should_store": seq%2 == 0})
		}
		b, _ := json.Marshal(map[string]any{"tasks": tasks})
		resp, err := s.client.Post(base+"/v1/tasks", "application/json", bytes.NewReader(b))
		if err != nil {
			s.loadErrCount.Add(1)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated {
			s.submitted.Add(int64(n))
		} else {
			s.loadErrCount.Add(1)
		}
	}
}

// loadBC calls path at rate per second, each call on its own goroutine, at most
// MaxLoadInFlightCount at once (beyond that a call is skipped and counted).
func (s *soak) loadBC(ctx context.Context, base, path string, rate float64, sem chan struct{}, wg *sync.WaitGroup) {
	if rate <= 0 {
		return
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			s.skippedCount.Add(1)
			continue
		}
		host := s.hosts[s.rng.IntN(len(s.hosts))]
		iv, _ := s.intervalOf(host)
		body := map[string]any{"min_interval_ms": iv.Milliseconds()}
		entry := "c"
		if path == "/v1/render" {
			entry = "b"
			render := seq%2 == 0
			body["should_render"] = render
			body["url"] = fmt.Sprintf("http://%s/b/%d", host, seq)
			if render {
				body["url"] = fmt.Sprintf("http://%s/b/r/%d", host, seq)
			}
		} else {
			body["url"] = fmt.Sprintf("http://%s/c/%d", host, seq)
		}
		wg.Go(func() {
			defer func() { <-sem }()
			s.call(base+path, entry, body)
		})
	}
}

func (s *soak) call(u, entry string, body map[string]any) {
	b, _ := json.Marshal(body)
	resp, err := s.client.Post(u, "application/json", bytes.NewReader(b))
	if err != nil {
		s.loadErrCount.Add(1)
		return
	}
	defer resp.Body.Close()
	var m struct {
		FailReason       *string `json:"fail_reason"`
		HasReachedOrigin bool    `json:"has_reached_origin"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		s.loadErrCount.Add(1)
		return
	}
	reason := "ok"
	if m.FailReason != nil {
		reason = *m.FailReason
	}
	s.reasonMu.Lock()
	s.reasons[fmt.Sprintf("%s %d %s", entry, resp.StatusCode, reason)]++
	s.reasonMu.Unlock()
	switch entry {
	case "b":
		s.bCount.Add(1)
		if resp.StatusCode == http.StatusTooManyRequests {
			s.b429Count.Add(1)
		} else if m.FailReason != nil {
			s.bFailCount.Add(1)
		}
	case "c":
		s.cCount.Add(1)
		if !m.HasReachedOrigin {
			s.cOwnCount.Add(1)
		}
	}
}

// killer kills the browser once every KillEvery renders, as a crash would.
func (s *soak) killer(ctx context.Context) {
	if s.sc.KillEvery <= 0 {
		return
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	next := int64(s.sc.KillEvery)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rendered := s.svc.render.Stats().RenderedCount
		s.renderCount.Store(rendered)
		if rendered < next {
			continue
		}
		next = rendered + int64(s.sc.KillEvery)
		for _, pid := range browserChildren(s.cfg.UserAgent) {
			// Our own child, started by the render pool: kill it as a crash would.
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				s.killedCount.Add(1)
			}
		}
	}
}

// browserChildren lists the browser processes this process started with the user agent
// ua (their helpers are the browser's children, and die with it). The render pool gives
// its browser --user-agent: the soak's own service's browser, not another one this
// process runs beside it (the tests in parallel with the smoke: their services' render
// pools, the console tests' Chromium).
func browserChildren(ua string) []int {
	self := strconv.Itoa(os.Getpid())
	flag := []byte("\x00--user-agent=" + ua + "\x00")
	var out []int
	forEachProcess(func(pid int, ppid, pgrp string, exe string) {
		if ppid != self || !strings.Contains(filepath.Base(exe), "chrom") {
			return
		}
		if cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && bytes.Contains(append([]byte{0}, cmdline...), flag) {
			out = append(out, pid)
		}
	})
	return out
}

// browserUsage sums the processes and RSS of every browser process in our process group.
func browserUsage() (count int, rss int64) {
	pgrp := strconv.Itoa(syscall.Getpgrp())
	forEachProcess(func(pid int, ppid, group string, exe string) {
		if group == pgrp && strings.Contains(filepath.Base(exe), "chrom") {
			count++
			rss += rssOf(strconv.Itoa(pid))
		}
	})
	return count, rss
}

// forEachProcess calls f for every live process with its parent, process group and
// executable.
func forEachProcess(f func(pid int, ppid, pgrp, exe string)) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fields := procstat.Fields(e.Name())
		if len(fields) < 3 || fields[0] == "Z" {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil {
			continue
		}
		f(pid, fields[1], fields[2], exe)
	}
}

// rssOf reads a process's resident set size.
func rssOf(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func fdCount() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}

// sampleLoop samples every SampleSeconds until ctx ends.
func (s *soak) sampleLoop(ctx context.Context, start time.Time) {
	fmt.Fprintf(s.out, "%8s %9s %12s %11s %5s %14s %6s %8s %9s %6s\n", "elapsed", "rss_mib", "browser_mib", "goroutines", "fds", "browser_procs", "done", "backlog", "rendered", "kills")
	s.sample(start)
	tick := time.NewTicker(time.Duration(s.sc.SampleSeconds) * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.sample(start)
		}
	}
}

func (s *soak) sample(start time.Time) {
	n, brss := browserUsage()
	qc := s.svc.entryA.queue.Counts()
	smp := soakSample{
		At: time.Since(start), RSSBytes: rssOf("self"), BrowserRSSBytes: brss, GoroutineCount: runtime.NumGoroutine(),
		FDCount: fdCount(), BrowserProcCount: n, DoneCount: qc.DoneCount, BacklogCount: qc.PendingCount + qc.LeasedCount,
		RenderedCount: s.svc.render.Stats().RenderedCount, KilledCount: s.killedCount.Load(),
	}
	s.samples = append(s.samples, smp)
	fmt.Fprintf(s.out, "%7.0fs %9.1f %12.1f %11d %5d %14d %6d %8d %9d %6d\n", smp.At.Seconds(), mib(smp.RSSBytes),
		mib(smp.BrowserRSSBytes), smp.GoroutineCount, smp.FDCount, smp.BrowserProcCount, smp.DoneCount, smp.BacklogCount,
		smp.RenderedCount, smp.KilledCount)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// flatness compares the median of the samples after the warm-up's first third with the
// median of the last third of the load (before the drain).
type flatness struct {
	name        string
	first, last float64
	limit       float64
}

func (f flatness) isFlat() bool { return f.last <= f.limit }

func (s *soak) flatness() []flatness {
	var load []soakSample
	for _, smp := range s.samples[:max(len(s.samples)-1, 0)] { // the last one is after the drain
		if smp.At >= time.Duration(s.sc.WarmupSeconds)*time.Second {
			load = append(load, smp)
		}
	}
	if len(load) < 3 {
		return nil
	}
	third := len(load) / 3
	median := func(ss []soakSample, f func(soakSample) float64) float64 {
		v := make([]float64, len(ss))
		for i, x := range ss {
			v[i] = f(x)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	first, last := load[:third], load[len(load)-third:]
	metric := func(name string, f func(soakSample) float64, limit func(first float64) float64) flatness {
		a := median(first, f)
		return flatness{name: name, first: a, last: median(last, f), limit: limit(a)}
	}
	return []flatness{
		// RSS may settle higher as caches and pools fill; growth beyond a half plus 64 MiB
		// is not settling.
		metric("rss_mib", func(x soakSample) float64 { return mib(x.RSSBytes) }, func(a float64) float64 { return a*1.5 + 64 }),
		metric("goroutines", func(x soakSample) float64 { return float64(x.GoroutineCount) }, func(a float64) float64 { return a*1.25 + 20 }),
		metric("fds", func(x soakSample) float64 { return float64(x.FDCount) }, func(a float64) float64 { return a*1.25 + 20 }),
		metric("browser_procs", func(x soakSample) float64 { return float64(x.BrowserProcCount) }, func(a float64) float64 { return a + 4 }),
		// Not a resource: a growing backlog means the load is more than the service
		// sustains, and the resources holding it (goroutines, connections) grow with it.
		metric("backlog", func(x soakSample) float64 { return float64(x.BacklogCount) },
			func(a float64) float64 { return a*1.5 + s.sc.TasksPerSecond*float64(s.sc.SampleSeconds) }),
	}
}

// report prints the summary and returns an error when the soak failed.
func (s *soak) report(counts localqueue.Counts, doneIDs int, interrupted bool) error {
	violations := s.origin.Violations(s.intervalOf, 2*time.Millisecond)
	submitted := int(s.submitted.Load())
	lost := submitted - doneIDs
	tw := tabwriter.NewWriter(s.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nsoak summary\t")
	fmt.Fprintf(tw, "  entry A tasks submitted\t%d\n", submitted)
	fmt.Fprintf(tw, "    done\t%d\t(succeeded %d, failed %d, own failures %d)\n", doneIDs, counts.SucceededCount, counts.DoneCount-counts.SucceededCount, counts.OwnFailureCount())
	fmt.Fprintf(tw, "    lost tasks\t%d\n", lost)
	fmt.Fprintf(tw, "  entry B calls\t%d\t(429 %d, 200 with a fail_reason %d)\n", s.bCount.Load(), s.b429Count.Load(), s.bFailCount.Load())
	fmt.Fprintf(tw, "  entry C calls\t%d\t(has_reached_origin=false %d)\n", s.cCount.Load(), s.cOwnCount.Load())
	fmt.Fprintf(tw, "  load calls skipped (in-flight bound) / failed\t%d / %d\n", s.skippedCount.Load(), s.loadErrCount.Load())
	fmt.Fprintf(tw, "  renders\t%d\n", s.svc.render.Stats().RenderedCount)
	fmt.Fprintf(tw, "  browser kills\t%d\t(restarts %d)\n", s.killedCount.Load(), s.svc.render.Stats().RestartCount)
	fmt.Fprintf(tw, "  requests at the origin\t%d\n", len(s.origin.Arrivals()))
	fmt.Fprintf(tw, "  violations\t%d\n", len(violations))
	tw.Flush()
	keys := make([]string, 0, len(s.reasons))
	for k := range s.reasons {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintln(s.out, "  B and C answers (entry, http status, fail_reason):")
	for _, k := range keys {
		fmt.Fprintf(s.out, "    %-40s %d\n", k, s.reasons[k])
	}
	if len(counts.FailedCount) > 0 {
		fmt.Fprintln(s.out, "  A failures by fail_reason:")
		for r, n := range counts.FailedCount {
			fmt.Fprintf(s.out, "    %-40s %d\n", r, n)
		}
	}
	for i, v := range violations {
		if i == 10 {
			fmt.Fprintf(s.out, "    … %d more\n", len(violations)-10)
			break
		}
		fmt.Fprintf(s.out, "    violation: %s\n", v)
	}
	var problems []string
	fmt.Fprintln(s.out, "  flatness (median after the warm-up's first third → last third of the load; limit):")
	flat := s.flatness()
	if flat == nil {
		problems = append(problems, "too few samples to judge flatness")
	}
	for _, f := range flat {
		verdict := "flat"
		if !f.isFlat() {
			verdict = "GROWING"
			problems = append(problems, f.name+" grows")
		}
		fmt.Fprintf(s.out, "    %-14s %10.1f → %10.1f (limit %.1f): %s\n", f.name, f.first, f.last, f.limit, verdict)
	}
	if len(violations) > 0 {
		problems = append(problems, fmt.Sprintf("%d violations", len(violations)))
	}
	if lost != 0 {
		problems = append(problems, fmt.Sprintf("%d lost tasks", lost))
	}
	if interrupted {
		problems = append(problems, "interrupted")
	}
	fmt.Fprintln(s.out, "  goroutines at the end of the load, by function (top 8):")
	for _, g := range s.goroutinesAtEnd {
		fmt.Fprintf(s.out, "    %5d  %s\n", g.count, g.where)
	}
	if s.stacksAtDrain != "" {
		fmt.Fprintf(s.out, "  goroutines after the drain (a task was not done):\n%s\n", s.stacksAtDrain)
	}
	if len(problems) > 0 {
		fmt.Fprintf(s.out, "soak: FAIL: %s\n", strings.Join(problems, ", "))
		return fmt.Errorf("soak failed: %s", strings.Join(problems, ", "))
	}
	fmt.Fprintln(s.out, "soak: PASS: violations 0, lost tasks 0, resources flat")
	return nil
}

// goroutineProfile is every goroutine's stack, grouped (runtime/pprof's debug=1 format).
func goroutineProfile() (string, error) {
	var b bytes.Buffer
	err := pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String(), err
}

// allStacks is goroutineProfile for a report: its error, if any, in its place.
func allStacks() string {
	p, err := goroutineProfile()
	if err != nil {
		return err.Error()
	}
	return p
}

// goroutineGroup is a number of goroutines with the same stack.
type goroutineGroup struct {
	count int
	where string // the function on top of the stack ← the goroutine's own function
}

// goroutineGroups groups the live goroutines by stack (runtime/pprof's debug=1 format) and
// returns the n largest groups.
func goroutineGroups(n int) []goroutineGroup {
	profile, err := goroutineProfile()
	if err != nil {
		return nil
	}
	byWhere := map[string]int{}
	for block := range strings.SplitSeq(profile, "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		if len(lines) < 2 {
			continue
		}
		count, err := strconv.Atoi(strings.Fields(lines[0])[0])
		if err != nil {
			continue
		}
		var frames []string
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" {
				fn := f[2]
				if i := strings.LastIndex(fn, "+0x"); i > 0 {
					fn = fn[:i]
				}
				frames = append(frames, fn)
			}
		}
		if len(frames) == 0 {
			continue
		}
		byWhere[frames[0]+" ← "+frames[len(frames)-1]] += count
	}
	out := make([]goroutineGroup, 0, len(byWhere))
	for w, c := range byWhere {
		out = append(out, goroutineGroup{count: c, where: w})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].count > out[j].count || out[i].count == out[j].count && out[i].where < out[j].where
	})
	return out[:min(n, len(out))]
}

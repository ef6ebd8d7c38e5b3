package render

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/storage"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/render/chromium"
)

// BenchmarkRender renders the JS test page (XHR-filled after load) at concurrency 1, 4
// and 8, with the pool (a fresh browser context and tab per render, every request through
// the guarded proxy) and, side by side in the same run, with bare chromedp on long-lived
// tabs (one per worker, navigated again and again, no proxy, no isolation). Both wait for
// the same network idle and read the same things. Reported: pages/s, p50 latency and the
// peak memory of the browser's processes (sum of RSS, and of PSS, which counts shared
// pages once).
//
//	go test -run '^$' -bench BenchmarkRender -benchtime 40x ./render/
//
// Knobs for the design measurements in docs/benchmarks-render.md:
// RENDER_BENCH_WARM sets the pool's WarmTabs; RENDER_BENCH_BARE_MODES="newtab newctx
// clear multisite" adds bare variants: a new tab per page, a new browser context and tab
// per page, a long-lived tab whose cookies, storage and cache are cleared after every
// page, and long-lived tabs that go to another site (js1.test, js2.test, ...) each time.
//
// pool-hops is the pool with a HopAdmitter (no interval), as the service runs it: every
// document request is paused for the pauser's decision and every connection to an origin
// may hold a hop's first bytes. RENDER_BENCH_POOL_MODES="redirect" adds pool-hops-redirect:
// the page is reached through a redirect from another host (redirect.test → js.test),
// one admitted hop per render.
func BenchmarkRender(b *testing.B) {
	f := getFixture(b)
	for _, c := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("pool/c=%d", c), func(b *testing.B) { benchPool(b, f, c, benchOpts{}) })
		b.Run(fmt.Sprintf("pool-hops/c=%d", c), func(b *testing.B) { benchPool(b, f, c, benchOpts{hops: true}) })
		if strings.Contains(os.Getenv("RENDER_BENCH_POOL_MODES"), "redirect") {
			b.Run(fmt.Sprintf("pool-hops-redirect/c=%d", c), func(b *testing.B) {
				benchPool(b, f, c, benchOpts{hops: true, page: "redirect.test/"})
			})
		}
		b.Run(fmt.Sprintf("bare/c=%d", c), func(b *testing.B) { benchBare(b, f, c, "") })
		if m := os.Getenv("RENDER_BENCH_BARE_MODES"); m != "" {
			for _, mode := range strings.Fields(m) {
				b.Run(fmt.Sprintf("bare-%s/c=%d", mode, c), func(b *testing.B) { benchBare(b, f, c, mode) })
			}
		}
	}
}

// BenchmarkRenderFrames measures what admitting iframe documents on other hosts costs.
// Sixteen sites (frames1.test … frames16.test) serve the JS test page with one iframe of
// widget.test, as pages embed a video player or a share button; widget.test gets the
// service's default interval (1 s). The pool admits an iframe if widget.test's turn is
// now, else skips it (the service's mode; docs/benchmarks-render.md has it against the
// modes measured before). Also reported: the share of iframes skipped.
//
//	go test -run '^$' -bench BenchmarkRenderFrames -benchtime 32x ./render/
func BenchmarkRenderFrames(b *testing.B) {
	f := getFixture(b)
	for _, c := range []int{1, 4} {
		b.Run(fmt.Sprintf("frames-admit-now/c=%d", c), func(b *testing.B) {
			benchPool(b, f, c, benchOpts{hops: true, interval: time.Second, sites: "frames%d.test"})
		})
	}
}

// benchOpts are the pool variants of the benchmarks.
type benchOpts struct {
	hops     bool          // a HopAdmitter on a limiter of its own
	interval time.Duration // the limiter's default interval
	page     string        // host and path of the page; default js.test/
	sites    string        // a pattern of 16 sites (frames%d.test), one per page in turn
}

func benchPool(b *testing.B, f *fixture, c int, o benchOpts) {
	cfg := Config{
		Concurrency: c,
		QueueLength: c,
		UserAgent:   testUserAgent,
		Guard:       f.guard,
		Logger:      slog.New(slog.DiscardHandler),
		WarmTabs:    envInt("RENDER_BENCH_WARM"),
	}
	var hops HopAdmitter
	if o.hops {
		hops = limiterHops{l: limiter.New(clock.Real{}), defaultInterval: o.interval}
	}
	var pages []*url.URL
	if o.sites != "" {
		var rules []netguard.Rule
		for i := range 16 {
			host := fmt.Sprintf(o.sites, i+1)
			pages = append(pages, f.url(host+"/"))
			rules = append(rules, mustRule(host+":80:127.0.0.1:"+f.port))
		}
		rules = append(rules, mustRule("widget.test:80:127.0.0.1:"+f.port))
		cfg.Guard = netguard.New(netguard.Config{ConnectTo: rules, Resolver: fakeResolver{}, Dialer: loopbackOnly{f}})
	} else {
		page := o.page
		if page == "" {
			page = "js.test/"
		}
		pages = []*url.URL{f.url(page)}
	}
	p, err := newHopsPool(cfg, seams{}, hops)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var seq, blocked atomic.Int64
	one := func() error {
		u := pages[int(seq.Add(1))%len(pages)]
		out := p.Render(context.Background(), u, nil, 30*time.Second)
		if out.FailReason != "" || deref(out.TextLength) <= deref(out.RawTextLength) {
			return fmt.Errorf("render %s: fail_reason=%s text_length=%d raw_text_length=%d", u, failReason(out), deref(out.TextLength), deref(out.RawTextLength))
		}
		blocked.Add(int64(deref(out.HealthSignal.SkippedFrameCount)))
		return nil
	}
	// Warm up: the browser is up and its warm tabs are made.
	if err := one(); err != nil {
		b.Fatal(err)
	}
	blocked.Store(0)
	runBench(b, c, one)
	if o.sites != "" {
		b.ReportMetric(100*float64(blocked.Load())/float64(b.N), "frames_failed_pct")
	}
}

// startBareBrowser launches plain chromedp's browser with opts for a bare variant; it is
// closed when the benchmark ends.
func startBareBrowser(b *testing.B, opts []chromedp.ExecAllocatorOption) context.Context {
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), opts...)
	b.Cleanup(allocCancel)
	root, rootCancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(func(string, ...any) {}))
	b.Cleanup(rootCancel)
	if _, err := chromedp.Targets(root); err != nil {
		b.Fatal(err)
	}
	return root
}

func mustRule(s string) netguard.Rule {
	r, err := netguard.ParseConnectTo(s)
	if err != nil {
		panic(err)
	}
	return r
}

func benchBare(b *testing.B, f *fixture, c int, mode string) {
	opts := append(chromium.Flags(DefaultBinaryPath, testUserAgent),
		chromedp.Flag("host-resolver-rules", "MAP *.test 127.0.0.1:"+f.port))
	root := startBareBrowser(b, opts)
	cfgPool := &Pool{cfg: poolConfig{Config: Config{NetworkQuiet: DefaultNetworkQuiet, NetworkIdleMax: DefaultNetworkIdleMax}}, clk: clock.Real{}, log: slog.New(slog.DiscardHandler)}
	br := &browser{lost: chromedp.FromContext(root).Browser.LostConnection}
	tabs := make(chan *tab, c)
	for range c {
		tr := newTracker()
		tctx, cancel := chromedp.NewContext(root, chromedp.WithListener(tr.onEvent))
		defer cancel()
		if err := chromedp.Do(tctx); err != nil {
			b.Fatal(err)
		}
		tr.setMainFrame(cdp.FrameID(chromedp.FromContext(tctx).Target.TargetID))
		tabs <- &tab{b: br, ctx: tctx, tr: tr}
	}
	var seq atomic.Int64
	one := func() error {
		u := f.url("js.test/")
		if mode == "multisite" {
			// Every page on another site, as a crawl would go.
			u = f.url(fmt.Sprintf("js%d.test/", seq.Add(1)%16))
		}
		t := <-tabs
		defer func() { tabs <- t }()
		if mode == "clear" {
			defer func() {
				ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
				defer cancel()
				chromedp.Call(ctx, page.Navigate, page.NavigateParams{URL: "about:blank"})
				chromedp.Call(ctx, network.ClearBrowserCookies, cdp.Empty{})
				chromedp.Call(ctx, network.ClearBrowserCache, cdp.Empty{})
				chromedp.Call(ctx, storage.ClearDataForOrigin, storage.ClearDataForOriginParams{Origin: "http://js.test", StorageTypes: "all"})
			}()
		}
		if mode == "newtab" || mode == "newctx" {
			var opts []chromedp.ContextOption
			if mode == "newctx" {
				opts = append(opts, chromedp.WithNewBrowserContext())
			}
			tr := newTracker()
			tctx, cancel := chromedp.NewContext(root, append(opts, chromedp.WithListener(tr.onEvent))...)
			defer cancel()
			if err := chromedp.Do(tctx); err != nil {
				return err
			}
			tr.setMainFrame(cdp.FrameID(chromedp.FromContext(tctx).Target.TargetID))
			t = &tab{b: br, ctx: tctx, tr: tr}
		}
		resetTracker(t.tr)
		now := time.Now()
		j := &renderJob{p: cfgPool, u: u, st: &renderState{seen: true}, start: now, deadline: now.Add(30 * time.Second)}
		ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
		defer cancel()
		nav, err := chromedp.Call(ctx, page.Navigate, page.NavigateParams{URL: u.String()})
		if err != nil || nav.ErrorText != "" {
			return fmt.Errorf("navigate: %v %s", err, nav.ErrorText)
		}
		if err := j.wait(ctx, t); err != nil {
			return err
		}
		out := j.read(ctx, t)
		if out.FailReason != "" || deref(out.TextLength) <= deref(out.RawTextLength) {
			return fmt.Errorf("bare: fail_reason=%s text_length=%d raw_text_length=%d", failReason(out), deref(out.TextLength), deref(out.RawTextLength))
		}
		return nil
	}
	if err := one(); err != nil {
		b.Fatal(err)
	}
	runBench(b, c, one)
}

// BenchmarkRenderStages measures, one page at a time on a quiet browser, the CPU that each
// step of a render in a new browser context costs every browser process, against the same
// page in a long-lived tab: the context, the tab (which starts its renderer), chromedp's
// attach, the first navigation (load, network idle, read, as BenchmarkRender does) and the
// close (tab and context; the renderer exits). Each step is followed by a pause (300 ms)
// so that its asynchronous work is counted with it. Reported: each step's total CPU per
// page (stage_*_ms), and in the log the same by process type. Plain chromedp, no proxy.
// RENDER_BENCH_FLAGS="name=value,name,-name" adds browser flags to the pool's (or, with a
// leading -, takes one away), for the flag measurements of docs/benchmarks-render.md.
//
//	go test -run '^$' -bench BenchmarkRenderStages -benchtime 12x ./render/
func BenchmarkRenderStages(b *testing.B) {
	f := getFixture(b)
	opts := append(chromium.Flags(DefaultBinaryPath, testUserAgent),
		chromedp.Flag("host-resolver-rules", "MAP *.test 127.0.0.1:"+f.port))
	for _, kv := range strings.Split(os.Getenv("RENDER_BENCH_FLAGS"), ",") {
		name, value, hasValue := strings.Cut(strings.TrimSpace(kv), "=")
		switch {
		case name == "":
		case strings.HasPrefix(name, "-"):
			opts = append(opts, chromedp.Flag(name[1:], false))
		case hasValue:
			opts = append(opts, chromedp.Flag(name, value))
		default:
			opts = append(opts, chromedp.Flag(name, true))
		}
	}
	root := startBareBrowser(b, opts)
	br := chromedp.FromContext(root).Browser
	cfgPool := &Pool{cfg: poolConfig{Config: Config{NetworkQuiet: DefaultNetworkQuiet, NetworkIdleMax: DefaultNetworkIdleMax}}, clk: clock.Real{}, log: slog.New(slog.DiscardHandler)}
	u := f.url("js.test/")
	attach := func(opts ...chromedp.ContextOption) (*tab, context.CancelFunc, error) {
		tr := newTracker()
		tctx, cancel := chromedp.NewContext(root, append(opts, chromedp.WithListener(tr.onEvent))...)
		if err := chromedp.Do(tctx); err != nil {
			cancel()
			return nil, nil, err
		}
		tr.setMainFrame(cdp.FrameID(chromedp.FromContext(tctx).Target.TargetID))
		return &tab{b: &browser{lost: br.LostConnection}, ctx: tctx, tr: tr}, cancel, nil
	}
	render := func(t *tab) error {
		resetTracker(t.tr)
		now := time.Now()
		j := &renderJob{p: cfgPool, u: u, st: &renderState{seen: true}, start: now, deadline: now.Add(30 * time.Second)}
		ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
		defer cancel()
		if nav, err := chromedp.Call(ctx, page.Navigate, page.NavigateParams{URL: u.String()}); err != nil || nav.ErrorText != "" {
			return fmt.Errorf("navigate: %v %s", err, nav.ErrorText)
		}
		if err := j.wait(ctx, t); err != nil {
			return err
		}
		if out := j.read(ctx, t); out.FailReason != "" || deref(out.TextLength) <= deref(out.RawTextLength) {
			return fmt.Errorf("fail_reason=%s text_length=%d", failReason(out), deref(out.TextLength))
		}
		return nil
	}
	type stage struct {
		name  string
		total time.Duration
		by    map[string]time.Duration
	}
	var stages []*stage
	step := func(name string, fn func() error) {
		before := groupCPU()
		if err := fn(); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		settle := time.NewTimer(300 * time.Millisecond) // let the step's asynchronous work finish
		<-settle.C
		after := groupCPU()
		var st *stage
		for _, s := range stages {
			if s.name == name {
				st = s
			}
		}
		if st == nil {
			st = &stage{name: name, by: make(map[string]time.Duration)}
			stages = append(stages, st)
		}
		for k, v := range after {
			st.by[k] += v - before[k]
			st.total += v - before[k]
		}
		for k, v := range before {
			if _, ok := after[k]; !ok {
				st.by[k] -= v
				st.total -= v
			}
		}
	}

	long, longCancel, err := attach()
	if err != nil {
		b.Fatal(err)
	}
	defer longCancel()
	if err := render(long); err != nil { // warm up
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		step("longlived_page", func() error { return render(long) })
		var bctx cdp.BrowserContextID
		var tid target.ID
		step("new_context", func() error {
			r, err := cdp.Call(root, br, target.CreateBrowserContext, target.CreateBrowserContextParams{})
			bctx = r.BrowserContextID
			return err
		})
		step("new_tab", func() error {
			r, err := cdp.Call(root, br, target.CreateTarget, target.CreateTargetParams{URL: "about:blank", BrowserContextID: bctx})
			tid = r.TargetID
			return err
		})
		var t *tab
		var cancel context.CancelFunc
		step("attach", func() error {
			var err error
			t, cancel, err = attach(chromedp.WithTargetID(tid))
			return err
		})
		step("first_page", func() error { return render(t) })
		step("close", func() error {
			cancel() // chromedp closes the tab
			_, err := cdp.Call(root, br, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: bctx})
			return err
		})
	}
	b.StopTimer()
	var extra time.Duration
	var table strings.Builder
	for _, st := range stages {
		b.ReportMetric(float64(st.total.Milliseconds())/float64(b.N), "stage_"+st.name+"_ms")
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(st.by)) {
			if ms := st.by[k].Milliseconds() / int64(b.N); ms != 0 {
				parts = append(parts, fmt.Sprintf("%s %d", k, ms))
			}
		}
		fmt.Fprintf(&table, "\n%-15s %4d ms/page: %s", st.name, st.total.Milliseconds()/int64(b.N), strings.Join(parts, ", "))
		if st.name != "longlived_page" && st.name != "first_page" {
			extra += st.total
		}
	}
	if b.N > 1 { // the framework's first call (N=1) is not worth a table: the log keeps 10 lines
		b.Logf("CPU per page, N=%d:%s", b.N, table.String())
	}
	b.ReportMetric(float64(extra.Milliseconds())/float64(b.N), "stage_context_overhead_ms")
}

// groupCPU is the CPU time used so far by the browser processes of this run, by process
// type, with what each live process reaped of its exited children (the zygote reaps the
// renderers: counted as "renderer"; the browser its other helpers: "browser_child").
func groupCPU() map[string]time.Duration {
	out := make(map[string]time.Duration)
	for _, pid := range browserProcesses() {
		st := procStat(strconv.Itoa(pid))
		if st == nil {
			continue
		}
		tick := func(i int) time.Duration {
			n, _ := strconv.ParseInt(st[i], 10, 64)
			return time.Duration(n) * 10 * time.Millisecond // USER_HZ = 100
		}
		typ := procType(pid)
		out[typ] += tick(11) + tick(12)
		child := typ + "_child"
		if typ == "zygote" {
			child = "renderer"
		}
		out[child] += tick(13) + tick(14)
	}
	return out
}

func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

// resetTracker makes a long-lived tab's tracker ready for its next navigation.
func resetTracker(tr *tracker) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.armed = true
	tr.reqs = make(map[network.RequestID]*request)
	tr.inflight = 0
	tr.mainReq = ""
	tr.committed = ""
	tr.domReady, tr.loaded = false, false
	select {
	case <-tr.notify:
	default:
	}
}

// runBench runs b.N calls of one on c workers and reports pages/s, p50 latency and the
// peak memory of the browser processes.
func runBench(b *testing.B, c int, one func() error) {
	procs := startProcSampler()

	var next atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				s := time.Now()
				err := one()
				d := time.Since(s)
				mu.Lock()
				lat = append(lat, d)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	byType := procs.stop()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pages/s")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50_ms")
	b.ReportMetric(float64(procs.peakRSS)/(1<<20), "peak_rss_MB")
	b.ReportMetric(float64(procs.peakPSS)/(1<<20), "peak_pss_MB")
	var total time.Duration
	for _, k := range slices.Sorted(maps.Keys(byType)) {
		total += byType[k]
		b.ReportMetric(float64(byType[k].Milliseconds())/float64(b.N), "cpu_"+k+"_ms/page")
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "cpu_ms/page")
	b.ReportMetric(float64(procs.sampled.Milliseconds())/float64(b.N), "sampler_cpu_ms/page") // not in cpu_ms
	for k, n := range procs.started() {
		b.ReportMetric(float64(n)/float64(b.N), "new_"+k+"/page")
	}
}

// procSampler follows the browser's processes over a benchmark run, every 100 ms: their
// memory (peak of the sum of RSS, and of PSS, which counts shared pages once) and their CPU
// time by process type, and this test process's CPU (the origin, the proxies, chromedp,
// not this sampling: below). Processes alive at the end count from their first sample (or from
// the start) to the end; those that exited during the run are counted exactly through
// their parent's reaped CPU (cutime and cstime: the zygote reaps the renderers), less what
// they had used before the start, under the type of the parent's children (zygote:
// "renderer"; the browser: "browser_child", its exited helpers).
//
// PSS (smaps_rollup) makes the kernel walk every page table of every process: read at
// 10 Hz it cost this process a tenth of a core, so it is read once a second.
//
// The sampling itself is not the variant's work and is left out of "go": finding the
// browser's processes reads /proc/<pid>/stat and exe of every process of the machine,
// which on a shared machine (130 processes) was three quarters of this process's CPU in
// a pool run, about 80 ms per second of the run: a slower variant was charged more for
// being measured longer. The sampler runs on an OS thread of its own, whose CPU time is
// taken off (sampled).
type procSampler struct {
	stopc   chan struct{}
	done    chan struct{}
	start   time.Duration // this process's CPU at the start
	sampled time.Duration // the sampler's own CPU, once done is closed
	samples chan struct{} // told after each sample, when someone listens (tests)
	procs   map[int]*procCPU
	ticks   int
	peakRSS int64 // bytes
	peakPSS int64
}

type procCPU struct {
	typ     string
	ppid    int
	isNew   bool          // started during the run
	first   time.Duration // utime+stime at the start (0 for a process started later)
	last    time.Duration
	reaped0 time.Duration // cutime+cstime when first seen
	reapedN time.Duration
	alive   bool
}

func startProcSampler() *procSampler {
	s := &procSampler{stopc: make(chan struct{}), done: make(chan struct{}), samples: make(chan struct{}), procs: make(map[int]*procCPU)}
	s.sample(true)
	s.start = selfCPU()
	go func() {
		defer close(s.done)
		// Only this goroutine runs on its thread while it is locked to it: the thread's
		// CPU is the sampling's.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t0 := threadCPU()
		defer func() { s.sampled = threadCPU() - t0 }()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				s.sample(false)
				select {
				case s.samples <- struct{}{}:
				default:
				}
			case <-s.stopc:
				s.sample(false)
				return
			}
		}
	}()
	return s
}

func (s *procSampler) sample(atStart bool) {
	for _, pc := range s.procs {
		pc.alive = false
	}
	withPSS := s.ticks%10 == 0
	s.ticks++
	var rss, pss int64
	for _, pid := range browserProcesses() {
		st := procStat(strconv.Itoa(pid))
		if st == nil {
			continue
		}
		// Fields after the name: ... rss(21), in pages.
		if n, err := strconv.ParseInt(st[21], 10, 64); err == nil {
			rss += n * int64(os.Getpagesize())
		}
		if withPSS {
			pss += procKB("/proc/"+strconv.Itoa(pid)+"/smaps_rollup", "Pss:") * 1024
		}
		// Fields after the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
		tick := func(i int) time.Duration {
			n, _ := strconv.ParseInt(st[i], 10, 64)
			return time.Duration(n) * 10 * time.Millisecond // USER_HZ = 100
		}
		cpu, reaped := tick(11)+tick(12), tick(13)+tick(14)
		pc := s.procs[pid]
		if pc == nil {
			ppid, _ := strconv.Atoi(st[1])
			pc = &procCPU{typ: procType(pid), ppid: ppid, reaped0: reaped, isNew: !atStart}
			if atStart {
				pc.first = cpu
			}
			s.procs[pid] = pc
		}
		pc.last, pc.reapedN, pc.alive = cpu, reaped, true
	}
	s.peakRSS = max(s.peakRSS, rss)
	s.peakPSS = max(s.peakPSS, pss)
}

// started counts the processes started during the run, by type (a process that lived
// less than a sampling period may be missed).
func (s *procSampler) started() map[string]int {
	out := make(map[string]int)
	for _, pc := range s.procs {
		if pc.isNew {
			out[pc.typ]++
		}
	}
	return out
}

func (s *procSampler) stop() map[string]time.Duration {
	close(s.stopc)
	<-s.done
	out := map[string]time.Duration{"go": selfCPU() - s.start - s.sampled}
	childType := func(parent *procCPU) string {
		if parent.typ == "zygote" {
			return "renderer"
		}
		return parent.typ + "_child"
	}
	for _, pc := range s.procs {
		if pc.alive {
			out[pc.typ] += pc.last - pc.first
			out[childType(pc)] += pc.reapedN - pc.reaped0
		} else if parent := s.procs[pc.ppid]; parent != nil {
			out[childType(parent)] -= pc.first // counted in the parent's reaped CPU
		}
	}
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

// procType names a browser process by its --type (and a utility's sub-type). Chromium
// rewrites its helpers' command lines with spaces between the arguments.
func procType(pid int) string {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	typ, sub := "browser", ""
	for _, a := range strings.FieldsFunc(string(data), func(r rune) bool { return r == 0 || r == ' ' }) {
		if v, ok := strings.CutPrefix(a, "--type="); ok {
			typ = v
		}
		if v, ok := strings.CutPrefix(a, "--utility-sub-type="); ok {
			sub = v
		}
	}
	if typ == "utility" && sub != "" {
		typ = strings.ToLower(sub[strings.LastIndexByte(sub, '.')+1:])
	}
	return strings.ReplaceAll(typ, "-", "_")
}

// selfCPU is this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPU is the calling OS thread's user and system CPU time so far.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rusageThread is Linux's RUSAGE_THREAD, which package syscall does not name.
const rusageThread = 1

func procKB(path, key string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			fields := strings.Fields(rest)
			if len(fields) > 0 {
				n, _ := strconv.ParseInt(fields[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

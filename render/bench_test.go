package render

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/storage"
	"github.com/chromedp/chromedp"

	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
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

// BenchmarkRenderFrames measures what admitting iframe documents on other hosts would
// cost. Sixteen sites (frames1.test … frames16.test) serve the JS test page with one
// iframe of widget.test, as pages embed a video player or a share button; widget.test
// gets the service's default interval (1 s). Variants, all with hops admitted:
// frames-free (iframes are sent unadmitted, the default), frames-admit-now (admitted if
// widget.test's turn is now, else the iframe is failed) and frames-admit-wait (admitted,
// waiting for widget.test's turn up to the render's deadline). Also reported: the share
// of iframes failed.
//
//	go test -run '^$' -bench BenchmarkRenderFrames -benchtime 32x ./render/
func BenchmarkRenderFrames(b *testing.B) {
	f := getFixture(b)
	for _, c := range []int{1, 4} {
		for _, m := range []struct {
			name string
			mode frameMode
		}{{"free", frameFree}, {"admit-now", frameAdmitNow}, {"admit-wait", frameAdmitWait}} {
			b.Run(fmt.Sprintf("frames-%s/c=%d", m.name, c), func(b *testing.B) {
				benchPool(b, f, c, benchOpts{hops: true, frames: m.mode, interval: time.Second, sites: "frames%d.test"})
			})
		}
	}
}

// benchOpts are the pool variants of the benchmarks.
type benchOpts struct {
	hops     bool          // a HopAdmitter on a limiter of its own
	interval time.Duration // the limiter's default interval
	frames   frameMode
	page     string // host and path of the page; default js.test/
	sites    string // a pattern of 16 sites (frames%d.test), one per page in turn
}

func benchPool(b *testing.B, f *fixture, c int, o benchOpts) {
	cfg := Config{
		Concurrency: c,
		QueueLength: c,
		UserAgent:   testUserAgent,
		Guard:       f.guard,
		Logger:      slog.New(slog.DiscardHandler),
		WarmTabs:    envInt("RENDER_BENCH_WARM"),
		frames:      o.frames,
	}
	var l *limiter.Limiter
	if o.hops {
		l = limiter.New(clock.Real{})
		cfg.Hops = limiterHops{l: l, defaultInterval: o.interval}
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
	p, err := New(cfg)
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
		blocked.Add(int64(deref(out.HealthSignal.BlockedRequestCount)))
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

func mustRule(s string) netguard.Rule {
	r, err := netguard.ParseConnectTo(s)
	if err != nil {
		panic(err)
	}
	return r
}

func benchBare(b *testing.B, f *fixture, c int, mode string) {
	opts := append(localFlags(DefaultBinaryPath, testUserAgent),
		chromedp.Flag("host-resolver-rules", "MAP *.test 127.0.0.1:"+f.port))
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer allocCancel()
	root, rootCancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(func(string, ...any) {}))
	defer rootCancel()
	if _, err := chromedp.Targets(root); err != nil {
		b.Fatal(err)
	}
	cfgPool := &Pool{cfg: Config{NetworkQuiet: DefaultNetworkQuiet, NetworkIdleMax: DefaultNetworkIdleMax}, clk: clock.Real{}, log: slog.New(slog.DiscardHandler)}
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
	stopMem := make(chan struct{})
	var peakRSS, peakPSS atomic.Int64
	memDone := make(chan struct{})
	go func() {
		defer close(memDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			rss, pss := browserMemory()
			if rss > peakRSS.Load() {
				peakRSS.Store(rss)
			}
			if pss > peakPSS.Load() {
				peakPSS.Store(pss)
			}
			select {
			case <-tick.C:
			case <-stopMem:
				return
			}
		}
	}()

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
	close(stopMem)
	<-memDone
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pages/s")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50_ms")
	b.ReportMetric(float64(peakRSS.Load())/(1<<20), "peak_rss_MB")
	b.ReportMetric(float64(peakPSS.Load())/(1<<20), "peak_pss_MB")
}

// browserMemory sums the RSS and PSS, in bytes, of the browser processes of this run.
func browserMemory() (rss, pss int64) {
	for _, pid := range browserProcesses() {
		rss += procKB("/proc/"+strconv.Itoa(pid)+"/status", "VmRSS:") * 1024
		pss += procKB("/proc/"+strconv.Itoa(pid)+"/smaps_rollup", "Pss:") * 1024
	}
	return rss, pss
}

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

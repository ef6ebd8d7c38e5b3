package render

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
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
func BenchmarkRender(b *testing.B) {
	f := getFixture(b)
	for _, c := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("pool/c=%d", c), func(b *testing.B) { benchPool(b, f, c) })
		b.Run(fmt.Sprintf("bare/c=%d", c), func(b *testing.B) { benchBare(b, f, c, "") })
		if m := os.Getenv("RENDER_BENCH_BARE_MODES"); m != "" {
			for _, mode := range strings.Fields(m) {
				b.Run(fmt.Sprintf("bare-%s/c=%d", mode, c), func(b *testing.B) { benchBare(b, f, c, mode) })
			}
		}
	}
}

func benchPool(b *testing.B, f *fixture, c int) {
	p, err := New(Config{
		Concurrency: c,
		QueueLength: c,
		UserAgent:   testUserAgent,
		Guard:       f.guard,
		Logger:      slog.New(slog.DiscardHandler),
		WarmTabs:    envInt("RENDER_BENCH_WARM"),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	u := f.url("js.test/")
	one := func() error {
		out := p.Render(context.Background(), u, nil, 30*time.Second)
		if out.FailReason != "" || deref(out.TextLength) <= deref(out.RawTextLength) {
			return fmt.Errorf("render: fail_reason=%s text_length=%d raw_text_length=%d", failReason(out), deref(out.TextLength), deref(out.RawTextLength))
		}
		return nil
	}
	// Warm up: the browser is up and its warm tabs are made.
	if err := one(); err != nil {
		b.Fatal(err)
	}
	runBench(b, c, one)
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

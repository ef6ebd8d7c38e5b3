package render

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
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
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/render/chromium"
)

// benchRenderCrawl is BenchmarkRenderCrawl (servicebench_test.go): renders on crawl-like
// traffic (`bash scripts/bench.sh render` prints it as a table). Pages:
//   - todomvc: the eight TodoMVC apps of the npm package todomvc, every render on a new
//     site name (cold);
//   - revisit: the same apps as 8 sites of 4 pages each (the app's page with ?page=N),
//     interleaved as a crawl visits them (every site's first page, then every site's
//     second, ...); each round of 32 renders is on new site names;
//   - heavy: a page with 5 stylesheets, 10 scripts, 10 images, 3 web fonts and 2 XHRs, on
//     a new site every render.
//
// Variants: pool (the service's pool as shipped: IsolationWipe, images, media and fonts
// skipped, hops admitted, every request through the guarded proxy); pool-context (the
// same with IsolationContext, for the choice of the default); bare-multisite (plain
// chromedp, a long-lived tab per worker, no isolation, no proxy); shared-context
// (Crawlee's default: one shared browser context, a new tab per page, closed after);
// service (below). Concurrency 1, 4 and 8. Reported per run: pages/s, p50_ms, cpu_ms/page (every process
// of the variant's browser, exited renderers included through the reaping zygote, and
// this process but its sampling of /proc, sampler_cpu_ms/page), origin_requests/page,
// peak_pss_MB; for the pool also cdp_calls/page (the
// CDP commands sent, the tabs' upkeep included; by method with RENDER_BENCH_CDP set) and
// wipe_ms (the mean wipe between two renders of a tab) and tab_wait_ms (the mean time a
// render waited for its tab: a wipe on the critical path shows here). pool-spare is the
// pool with SpareTabCount 1 (not in the default grid).
//
// service is the whole service as users call it: `POST /v1/render` over HTTP on
// 127.0.0.1 to the server, the engine (limiter, global cap, render slot) and the pool as
// cmd/downloader wires them; it needs packages that import render, so the benchmark's
// entry point is in the external test package (servicebench_test.go), which passes the
// variant in.
//
// RENDER_BENCH_PAGES, RENDER_BENCH_VARIANTS and RENDER_BENCH_CONCURRENCY narrow the grid
// (space-separated lists).
//
//	go test -run '^$' -bench BenchmarkRenderCrawl -benchtime 16x ./render/
func benchRenderCrawl(b *testing.B, service crawlService) {
	dir := todomvcDir(b)
	o := newCrawlOrigin(b, dir)
	pages := envList("RENDER_BENCH_PAGES", "todomvc revisit heavy")
	variants := envList("RENDER_BENCH_VARIANTS", "pool bare-multisite shared-context pool-context service")
	var cs []int
	for _, s := range envList("RENDER_BENCH_CONCURRENCY", "1 4 8") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("RENDER_BENCH_CONCURRENCY: %q", s)
		}
		cs = append(cs, n)
	}
	var run atomic.Int64 // every sub-benchmark run gets site names of its own
	for _, pg := range pages {
		for _, c := range cs {
			for _, v := range variants {
				b.Run(fmt.Sprintf("%s/%s/c=%d", v, pg, c), func(b *testing.B) {
					benchCrawl(b, o, v, pg, c, run.Add(1), service)
				})
			}
		}
	}
}

func envList(name, def string) []string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return strings.Fields(v)
	}
	return strings.Fields(def)
}

// crawlURL is the i-th URL of workload pg in run.
func crawlURL(pg string, run, i int64) string {
	switch pg {
	case "todomvc":
		return todomvcURL(fmt.Sprintf("t%d-%d.todo.test", run, i), todomvcApps[i%int64(len(todomvcApps))])
	case "revisit":
		round, j := i/32, i%32
		site, pageNo := j%8, j/8
		return todomvcURL(fmt.Sprintf("r%d-%d-%d.todo.test", run, round, site), todomvcApps[site]) + "?page=" + strconv.FormatInt(pageNo+1, 10)
	case "heavy":
		return fmt.Sprintf("http://h%d-%d.heavy.test/", run, i)
	}
	panic("unknown page " + pg)
}

// crawlService starts the whole service in front of a pool of c slots on guard (for the
// benchmark's own lifetime) and returns a render through `POST /v1/render`: an error
// unless the page was rendered with some text.
type crawlService func(b *testing.B, guard *netguard.Guard, c int) func(u *url.URL) error

func benchCrawl(b *testing.B, o *crawlOrigin, variant, pg string, c int, run int64, service crawlService) {
	var render func(u string) error
	startCount := func() {}
	switch variant {
	case "pool", "pool-context", "pool-spare":
		iso := IsolationWipe
		if variant == "pool-context" {
			iso = IsolationContext
		}
		calls := newCDPCounter()
		var wipes atomic.Int64
		var wipeNanos atomic.Int64
		var takes, takeNanos atomic.Int64
		spares := 0
		if variant == "pool-spare" {
			spares = 1
		}
		p, err := newHopsPool(Config{
			Concurrency: c, QueueLength: c, UserAgent: testUserAgent, Guard: o.guard,
			Logger: slog.New(slog.DiscardHandler), Isolation: iso,
			SpareTabCount: spares,
			Trace: &Trace{
				CDPMessagef: calls.debugf,
				TabWiped:    func(d time.Duration) { wipes.Add(1); wipeNanos.Add(int64(d)) },
				TabTaken:    func(d time.Duration) { takes.Add(1); takeNanos.Add(int64(d)) },
			},
		}, seams{}, limiterHops{l: limiter.New(clock.Real{})})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		defer func() {
			// Counted from the warm-up's end: the calls of b.N renders and of their tabs'
			// upkeep (wipes, replacements).
			calls.report(b, b.N)
			if n := wipes.Load(); n > 0 {
				b.ReportMetric(float64(wipeNanos.Load())/float64(n)/1e6, "wipe_ms")
			}
			if n := takes.Load(); n > 0 {
				b.ReportMetric(float64(takeNanos.Load())/float64(n)/1e6, "tab_wait_ms")
			}
		}()
		startCount = func() { calls.reset(); wipes.Store(0); wipeNanos.Store(0); takes.Store(0); takeNanos.Store(0) }
		render = func(u string) error {
			out := p.Render(context.Background(), o.url(u), nil, 30*time.Second)
			if out.FailReason != "" || deref(out.TextLength) <= 0 {
				return fmt.Errorf("%s %s: fail_reason=%s text_length=%d", variant, u, failReason(out), deref(out.TextLength))
			}
			return nil
		}
	case "bare-multisite", "shared-context":
		render = bareCrawler(b, o, variant, c)
	case "service":
		post := service(b, o.guard, c)
		render = func(u string) error { return post(o.url(u)) }
	default:
		b.Fatalf("unknown variant %q", variant)
	}
	// Warm up on a site of its own: the browser is up (and the pool's warm tabs made).
	if err := render(fmt.Sprintf("http://warm-%d.heavy.test/", run)); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	startCount()
	before := o.requests.Load()
	runBench(b, c, func() error { return render(crawlURL(pg, run, seq.Add(1)-1)) })
	b.ReportMetric(float64(o.requests.Load()-before)/float64(b.N), "origin_requests/page")
}

// bareCrawler is plain chromedp on its own browser: long-lived tabs, one per worker
// (bare-multisite), or a new tab per page in the one shared default context, closed after
// (shared-context). Both wait for the same network idle and read the same things as the
// pool.
func bareCrawler(b *testing.B, o *crawlOrigin, variant string, c int) func(u string) error {
	opts := append(chromium.Flags(DefaultBinaryPath, testUserAgent),
		chromedp.Flag("host-resolver-rules", "MAP *.test 127.0.0.1:"+o.port))
	root := startBareBrowser(b, opts)
	cfgPool := &Pool{cfg: poolConfig{Config: Config{NetworkQuiet: DefaultNetworkQuiet, NetworkIdleMax: DefaultNetworkIdleMax}}, clk: clock.Real{}, log: slog.New(slog.DiscardHandler)}
	br := &browser{lost: chromedp.FromContext(root).Browser.LostConnection}
	newTab := func() (*tab, context.CancelFunc, error) {
		tr := newTracker()
		tctx, cancel := chromedp.NewContext(root, chromedp.WithListener(tr.onEvent))
		if err := chromedp.Do(tctx); err != nil {
			cancel()
			return nil, nil, err
		}
		tr.setMainFrame(cdp.FrameID(chromedp.FromContext(tctx).Target.TargetID))
		return &tab{b: br, ctx: tctx, tr: tr}, cancel, nil
	}
	tabs := make(chan *tab, c)
	if variant == "bare-multisite" {
		for range c {
			t, cancel, err := newTab()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(cancel)
			tabs <- t
		}
	}
	return func(raw string) error {
		var t *tab
		if variant == "bare-multisite" {
			t = <-tabs
			defer func() { tabs <- t }()
		} else {
			nt, cancel, err := newTab()
			if err != nil {
				return err
			}
			defer cancel()
			t = nt
		}
		resetTracker(t.tr)
		u := o.url(raw)
		now := time.Now()
		j := &renderJob{p: cfgPool, u: u, st: &renderState{seen: true}, start: now, deadline: now.Add(30 * time.Second)}
		ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
		defer cancel()
		nav, err := chromedp.Call(ctx, page.Navigate, page.NavigateParams{URL: u.String()})
		if err != nil || nav.ErrorText != "" {
			return fmt.Errorf("%s navigate %s: %v %s", variant, u, err, nav.ErrorText)
		}
		if err := j.wait(ctx, t); err != nil {
			return err
		}
		if out := j.read(ctx, t); out.FailReason != "" || deref(out.TextLength) <= 0 {
			return fmt.Errorf("%s %s: fail_reason=%s text_length=%d", variant, u, failReason(out), deref(out.TextLength))
		}
		return nil
	}
}

// cdpCounter counts the CDP commands a pool's browser connection sends, by method
// (Trace.CDPMessagef sees each message sent as "-> {json}").
type cdpCounter struct {
	mu       sync.Mutex
	byMethod map[string]int
}

func newCDPCounter() *cdpCounter { return &cdpCounter{byMethod: make(map[string]int)} }

func (c *cdpCounter) debugf(format string, args ...any) {
	if !strings.HasPrefix(format, "->") || len(args) == 0 {
		return
	}
	msg, ok := args[0].([]byte)
	if !ok {
		return
	}
	_, rest, ok := bytes.Cut(msg, []byte(`"method":"`))
	if !ok {
		return
	}
	m, _, _ := bytes.Cut(rest, []byte(`"`))
	c.mu.Lock()
	c.byMethod[string(m)]++
	c.mu.Unlock()
}

func (c *cdpCounter) reset() {
	c.mu.Lock()
	clear(c.byMethod)
	c.mu.Unlock()
}

// report gives the commands per render, in total and, with RENDER_BENCH_CDP set, by
// method on the log.
func (c *cdpCounter) report(b *testing.B, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for _, v := range c.byMethod {
		total += v
	}
	b.ReportMetric(float64(total)/float64(n), "cdp_calls/page")
	if os.Getenv("RENDER_BENCH_CDP") != "" {
		var sb strings.Builder
		for _, m := range slices.Sorted(maps.Keys(c.byMethod)) {
			fmt.Fprintf(&sb, " %s=%.2f", m, float64(c.byMethod[m])/float64(n))
		}
		b.Logf("cdp calls per page (N=%d):%s", n, sb.String())
	}
}

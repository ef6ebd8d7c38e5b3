package engine

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/fetch"
	"downloader/internal/nginxtest"
	"downloader/internal/procstat"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/store/embedded/embeddedtest"
)

// BenchmarkRecrawl: a recrawl of 1,000 unchanged pages (about 20 KB of HTML each, over 10
// hosts) at the real nginx (internal/nginxtest, TLS, HTTP/2, brotli), through the whole
// engine (entry A's RunTask with should_store, the real fetcher and the real embedded
// store), side by side in one run:
//
//   - conditional: the page store holds each URL's page and validators from a first pass,
//     so every request carries If-None-Match and If-Modified-Since and nginx answers 304;
//   - full: the same store with its validators hidden (LatestPage finds nothing), so every
//     request downloads the page again, as every recrawl did without conditional requests.
//
// One op is a pass over the 1,000 pages (4 tasks at a time, interval 0). Reported per
// page: wire-B/page, the bytes read and written on the fetcher's TCP connections (TLS
// records, counted by a dialer under the guard; the connections are already open);
// cpu-us/page, this process's user and system CPU (getrusage); origin-cpu-us/page, nginx's
// worker's (from /proc, in 10 ms ticks: coarse); pages/s. docs/benchmarks.md has the
// figures.
//
//	go test -run '^$' -bench Recrawl -benchtime 3x ./engine
func BenchmarkRecrawl(b *testing.B) {
	const pageCount, hostCount, workerCount = 1000, 10, 4
	files := make(map[string][]byte, pageCount)
	for i := range pageCount {
		files[fmt.Sprintf("p/%04d.html", i)] = recrawlPage(i)
	}
	s := nginxtest.Start(b, files)
	var wire wireCount
	rules := make([]netguard.Rule, 0, 1)
	rule, err := netguard.ParseConnectTo("*.example.com:443:" + s.HTTPSAddr)
	if err != nil {
		b.Fatal(err)
	}
	rules = append(rules, rule)
	f := fetch.New(fetch.Config{
		Guard:     netguard.New(netguard.Config{ConnectTo: rules, Dialer: &countingDialer{count: &wire}}),
		TLSConfig: &tls.Config{RootCAs: s.CA.Pool()},
	})
	b.Cleanup(f.Close)
	st := embeddedtest.Open(b, b.TempDir())
	clk := clock.Real{}
	lim := limiter.New(clk)
	gate := limiter.NewGate(workerCount*2, workerCount*2)
	conditional := New(Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: f, Pages: st, Results: st, DefaultTimeout: 30 * time.Second})
	full := New(Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: f, Pages: hiddenValidators{st}, Results: st, DefaultTimeout: 30 * time.Second})
	urls := make([]string, pageCount)
	for i := range urls {
		urls[i] = fmt.Sprintf("https://h%d.example.com/p/%04d.html", i%hostCount, i)
	}
	var seq atomic.Int64
	pass := func(e *Engine, wantStatus int) error {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workerCount)
		zero := int64(0)
		for range workerCount {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < pageCount; i = next.Add(1) - 1 {
					r := runAndStore(b, context.Background(), e, &downloader.Task{
						TaskID: strconv.FormatInt(seq.Add(1), 10), URL: urls[i], MinIntervalMs: &zero, ShouldStore: true})
					if r.Report == nil || r.Report.FailReason != nil || r.Report.HTTPStatus == nil || *r.Report.HTTPStatus != wantStatus || r.Report.PageKey == "" {
						errs <- fmt.Errorf("%s: %+v, want %d with a page", urls[i], r.Report, wantStatus)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	// The first crawl: stores every page with its validators, and opens one HTTP/2
	// connection per host.
	if err := pass(conditional, 200); err != nil {
		b.Fatal(err)
	}
	worker := nginxWorker(s)
	for _, v := range []struct {
		name       string
		e          *Engine
		wantStatus int
	}{{"full", full, 200}, {"conditional", conditional, 304}} {
		b.Run(v.name, func(b *testing.B) {
			wire0, cpu0, origin0 := wire.total(), processCPU(), worker.cpu()
			start := time.Now()
			for b.Loop() {
				if err := pass(v.e, v.wantStatus); err != nil {
					b.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			pages := float64(b.N * pageCount)
			b.ReportMetric(float64(wire.total()-wire0)/pages, "wire-B/page")
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/pages, "cpu-us/page")
			b.ReportMetric(float64((worker.cpu()-origin0).Microseconds())/pages, "origin-cpu-us/page")
			b.ReportMetric(pages/elapsed.Seconds(), "pages/s")
		})
	}
}

// recrawlPage is page i: about 20 KB of HTML of words drawn at random (seeded by i), so
// that pages differ and compress as text does.
func recrawlPage(i int) []byte {
	words := strings.Fields("the of and to in is was for on that with as by at from his it an were are which this be or has had not first one their its new after who they have her she two been other when there all during into school time may years more most only over city some world would where later up such used many can state about national out known university united then made")
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	var sb strings.Builder
	fmt.Fprintf(&sb, "<!doctype html><html><head><title>Page %d</title></head><body><h1>Page %d</h1>", i, i)
	for sb.Len() < 20_000 {
		sb.WriteString("<p>")
		for range 40 + rng.IntN(40) {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "<a href=\"/p/%04d.html\">next</a></p>\n", rng.IntN(1000))
	}
	sb.WriteString("</body></html>")
	return []byte(sb.String())
}

// hiddenValidators is the page store with nothing found by LatestPage: the engine then
// sends no validators, and fetches and stores each page in full.
type hiddenValidators struct{ downloader.PageStore }

func (hiddenValidators) LatestPage(context.Context, string) (downloader.PageRef, bool, error) {
	return downloader.PageRef{}, false, nil
}

// wireCount is the bytes read and written on the counted connections.
type wireCount struct{ read, written atomic.Int64 }

func (w *wireCount) total() int64 { return w.read.Load() + w.written.Load() }

// countingDialer dials TCP and counts every byte of the connection.
type countingDialer struct {
	d     net.Dialer
	count *wireCount
}

func (c *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := c.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, count: c.count}, nil
}

type countingConn struct {
	net.Conn
	count *wireCount
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.count.read.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.count.written.Add(int64(n))
	return n, err
}

// processCPU is this process's user and system CPU so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// nginxProcess is nginx's worker (one, in nginxtest's configuration), or "" when it
// cannot be found: its CPU then reads 0.
type nginxProcess string

// nginxWorker finds the child of nginx's master (its pid file in the server's prefix).
func nginxWorker(s *nginxtest.Server) nginxProcess {
	b, err := os.ReadFile(filepath.Join(s.Dir, "nginx.pid"))
	if err != nil {
		return ""
	}
	master := strings.TrimSpace(string(b))
	kids, err := os.ReadFile(filepath.Join("/proc", master, "task", master, "children"))
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(kids)); len(f) == 1 {
		return nginxProcess(f[0])
	}
	return ""
}

// cpu is the worker's user and system CPU so far, in clock ticks of 10 ms (USER_HZ is 100
// on Linux).
func (p nginxProcess) cpu() time.Duration {
	if p == "" {
		return 0
	}
	f := procstat.Fields(string(p))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

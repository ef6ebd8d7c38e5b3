package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/engine"
	"downloader/fetch"
	"downloader/limiter"
	"downloader/netguard"
)

// probeURLs is one GET per domain: entry C's load, a health check of many domains.
func probeURLs(domains int) []string {
	out := make([]string, domains)
	for i := range out {
		out[i] = fmt.Sprintf("http://p%05d.bench.test/", i)
	}
	return out
}

// runProbes sends one entry C probe per domain through the engine (limiter, global cap,
// guarded fetcher, text measured, nothing stored), concurrency at a time.
func runProbes(domains, concurrency int, latency time.Duration) (result, error) {
	res := result{name: "downloader entry C"}
	o := newOrigin(latency)
	defer o.Close()
	rule, err := netguard.ParseConnectTo(o.ConnectTo())
	if err != nil {
		return res, err
	}
	clk := clock.Real{}
	guard := netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}})
	lim := limiter.New(clk)
	gate := limiter.NewGate(concurrency, 0)
	f := fetch.New(fetch.Config{Clock: clk, Guard: guard})
	defer f.Close()
	eng := engine.New(engine.Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: f,
		DefaultMinInterval: time.Second, DefaultTimeout: 30 * time.Second})
	// A new limiter treats every domain as asked at its creation (conservative rebuild):
	// start once that interval has passed, as a running service would have.
	waitUntil(time.Now().Add(time.Second))
	var failed atomic.Int64
	work := func(ctx context.Context, raw string) {
		u, host, err := downloader.ParseTargetURL("url", raw)
		if err != nil {
			failed.Add(1)
			return
		}
		s := eng.Probe(ctx, downloader.Request{URL: raw, Domain: host, MinInterval: time.Second,
			IntervalSource: downloader.IntervalSourceRequest}, u)
		if s.FailReason != nil {
			failed.Add(1)
		}
	}
	res.total, res.cpu = fanOut(probeURLs(domains), concurrency, work)
	res.pageCount, res.failed = len(o.Arrivals()), int(failed.Load())
	return res, nil
}

// runBare does the same GETs with a bare net/http client (its own Transport with the idle
// pool bound of entry A's fetcher, a quarter of the descriptor limit) and reads each body: the floor entry C is measured
// against.
func runBare(domains, concurrency int, latency time.Duration) (result, error) {
	res := result{name: "bare net/http client"}
	o := newOrigin(latency)
	defer o.Close()
	target := o.Addr()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, target)
		},
		MaxIdleConns: idleBound(), MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var failed atomic.Int64
	work := func(ctx context.Context, raw string) {
		if _, err := url.Parse(raw); err != nil {
			failed.Add(1)
			return
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
		if err != nil {
			failed.Add(1)
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			failed.Add(1)
			return
		}
		_, err = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			failed.Add(1)
		}
	}
	res.total, res.cpu = fanOut(probeURLs(domains), concurrency, work)
	res.pageCount, res.failed = len(o.Arrivals()), int(failed.Load())
	return res, nil
}

// fanOut runs work on every URL, concurrency at a time, and returns the elapsed and
// process CPU time.
func fanOut(urls []string, concurrency int, work func(context.Context, string)) (elapsed, cpu time.Duration) {
	ctx := context.Background()
	next := make(chan string)
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), processCPU()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range next {
				work(ctx, u)
			}
		}()
	}
	for _, u := range urls {
		next <- u
	}
	close(next)
	wg.Wait()
	return time.Since(start), processCPU() - cpu0
}

// idleBound is the fetcher's idle pool bound: a quarter of the descriptor limit, within
// 1024..65536.
func idleBound() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return int(min(max(lim.Cur/4, 1024), 65536))
}

package render_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"downloader/clock"
	"downloader/engine"
	"downloader/fetch"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/render"
	"downloader/server"
)

// BenchmarkRenderCrawl measures renders on crawl-like traffic: the grid and its variants
// are described at benchRenderCrawl (crawlbench_test.go); this entry point gives it the
// service variant, which needs the engine and the server (they import render).
//
//	go test -run '^$' -bench BenchmarkRenderCrawl -benchtime 16x ./render/
func BenchmarkRenderCrawl(b *testing.B) {
	render.BenchRenderCrawl(b, startService)
}

// serviceRenderTimeout is each render's timeout_ms, as the pool variant's Render gets.
const serviceRenderTimeout = 30 * time.Second

// startService wires the service as cmd/downloader does for entry B (the limiter, the
// global cap, the fetcher, the pool with the engine's hop admitter, the engine, the
// server) on guard, serves it on 127.0.0.1, and returns a render through
// `POST /v1/render` with should_store false (the pool variant stores nothing either) and
// min_interval_ms 0 (the pool variant's limiter has no interval: the grid measures the
// renders, not the politeness). Everything is closed when b ends.
func startService(b *testing.B, guard *netguard.Guard, c int) func(u *url.URL) error {
	clk := clock.Real{}
	log := slog.New(slog.DiscardHandler)
	lim := limiter.New(clk)
	gate := limiter.NewGate(64, 64) // the service's max_concurrent_count default is far above c
	fetcher := fetch.New(fetch.Config{Clock: clk, Guard: guard, Logger: log, UserAgent: render.TestUserAgent})
	b.Cleanup(fetcher.Close)
	pool, err := render.New(render.Config{
		Clock: clk, Logger: log, Concurrency: c, QueueLength: c, UserAgent: render.TestUserAgent, Guard: guard,
		DefaultTimeout:  serviceRenderTimeout,
		ShouldAdmitHops: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pool.Close() })
	eng := engine.New(engine.Config{Clock: clk, Logger: log, Limiter: lim, Gate: gate, Fetcher: fetcher, Renderer: pool,
		DefaultTimeout: serviceRenderTimeout})
	srv := server.New(server.Config{Probe: eng, Render: eng, Settings: eng, Domains: lim, Slots: gate, Logger: log, Clock: clk})
	srv.SetReady(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		hs.Serve(ln)
	}()
	b.Cleanup(func() {
		eng.Stop()
		hs.Close()
		<-served
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c, DisableCompression: true}}
	b.Cleanup(client.CloseIdleConnections)
	endpoint := "http://" + ln.Addr().String() + "/v1/render"
	return func(u *url.URL) error {
		body, err := json.Marshal(map[string]any{"url": u.String(), "min_interval_ms": 0, "should_store": false,
			"timeout_ms": serviceRenderTimeout.Milliseconds()})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*serviceRenderTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("service %s: %w", u, err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return fmt.Errorf("service %s: %w", u, err)
		}
		var ans struct {
			FailReason string `json:"fail_reason"`
			TextLength *int   `json:"text_length"`
			HTML       string `json:"html"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &ans) != nil || ans.FailReason != "" || ans.TextLength == nil || *ans.TextLength <= 0 || ans.HTML == "" {
			return fmt.Errorf("service %s: HTTP %d: %.300s", u, resp.StatusCode, raw)
		}
		return nil
	}
}

package render

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
)

// BenchmarkRenderOverload is the adaptive render concurrency on an overloaded machine
// (`bash scripts/bench.sh render-overload` prints it as a table): TodoMVC apps, every
// render on a new site name (cold), offered by 8 workers at once (the engine's path:
// AcquireSlot in the pool's queue, then RenderInSlot), on a pool of 8 slots with the
// count fixed at 1, 2, 4 or 8 (--render-scaling=fixed with --render-concurrency N) or
// adaptive up to 8, and, first, one worker on one slot (unloaded: the reference p50).
// Side by side in one run. Reported per row: pages/s, p50_ms and p90_ms of the render in
// its slot (what the controller watches: the wait for a slot is the queue's),
// render_timeouts (the pool's default 30 s timeout), and, adaptive, the effective slot
// count at the end and its mean over the run (sampled every 100 ms).
//
//	go test -run '^$' -bench BenchmarkRenderOverload -benchtime 64x ./render/
func BenchmarkRenderOverload(b *testing.B) {
	dir := todomvcDir(b)
	o := newCrawlOrigin(b, dir)
	const offered = 8
	rows := []struct {
		name           string
		slots, workers int
		scaling        Scaling
		wantsEffective bool
	}{
		{"unloaded", 1, 1, ScalingFixed, false},
		{"fixed-1", 1, offered, ScalingFixed, false},
		{"fixed-2", 2, offered, ScalingFixed, false},
		{"fixed-4", 4, offered, ScalingFixed, false},
		{"fixed-8", 8, offered, ScalingFixed, false},
		{"adaptive", 8, offered, ScalingAdaptive, true},
	}
	// RENDER_BENCH_LOG names a file for the pool's log (the controller's steps).
	logger := slog.New(slog.DiscardHandler)
	if name := os.Getenv("RENDER_BENCH_LOG"); name != "" {
		f, err := os.Create(name)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		logger = slog.New(slog.NewTextHandler(f, nil))
	}
	var run atomic.Int64
	for _, r := range rows {
		b.Run(r.name, func(b *testing.B) {
			p, err := New(Config{
				Concurrency: r.slots, QueueLength: offered, UserAgent: testUserAgent, Guard: o.guard,
				Logger: logger, Scaling: r.scaling, ShouldAdmitHops: true,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			hops := limiterHops{l: limiter.New(clock.Real{})}
			id := run.Add(1)
			one := func(u string) (time.Duration, *downloader.Outcome) {
				release, failed := p.AcquireSlot(context.Background())
				if failed != nil {
					return 0, failed
				}
				defer release()
				s := time.Now()
				out := p.RenderInSlot(context.Background(), o.url(u), nil, hops, downloader.RenderOptions{})
				return time.Since(s), out
			}
			if _, out := one(fmt.Sprintf("http://warm-%d.heavy.test/", id)); out.FailReason != "" {
				b.Fatalf("warm-up: %s", failReason(out))
			}
			var (
				next     atomic.Int64
				mu       sync.Mutex
				lat      []time.Duration
				timeouts int
				firstErr error
			)
			stop := make(chan struct{})
			var effSum, effN int64
			var sampler sync.WaitGroup
			sampler.Go(func() {
				t := time.NewTicker(100 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						effSum += int64(p.Stats().EffectiveSlotCount)
						effN++
					}
				}
			})
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range r.workers {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						d, out := one(crawlURL("todomvc", id, i))
						mu.Lock()
						switch {
						case out.FailReason == downloader.FailRenderTimeout:
							timeouts++
						case out.FailReason != "" || deref(out.TextLength) <= 0:
							if firstErr == nil {
								firstErr = fmt.Errorf("render %d: fail_reason=%s text_length=%d", i, failReason(out), deref(out.TextLength))
							}
						default:
							lat = append(lat, d)
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(stop)
			sampler.Wait()
			if firstErr != nil {
				b.Fatal(firstErr)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "pages/s")
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50_ms")
				b.ReportMetric(float64(lat[len(lat)*9/10].Milliseconds()), "p90_ms")
			}
			b.ReportMetric(float64(timeouts), "render_timeouts")
			if r.wantsEffective {
				b.ReportMetric(float64(p.Stats().EffectiveSlotCount), "final_slots")
				if effN > 0 {
					b.ReportMetric(float64(effSum)/float64(effN), "mean_slots")
				}
			}
		})
	}
}

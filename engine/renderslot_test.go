package engine

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"testing/synctest"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/limiter"
)

// slotRenderer is a renderer with one slot and a bounded queue; a render holds its slot
// until the test lets it finish.
type slotRenderer struct {
	slots  *limiter.Gate
	finish chan struct{}
}

func (r *slotRenderer) AcquireSlot(ctx context.Context) (func(), *downloader.Outcome) {
	if err := r.slots.Acquire(ctx, limiter.QueueBounded); err != nil {
		if errors.Is(err, limiter.ErrQueueFull) {
			return nil, downloader.Failed(downloader.FailLocalQueueFull)
		}
		return nil, downloader.Failed(downloader.FailRenderTimeout)
	}
	return r.slots.Release, nil
}

func (r *slotRenderer) RenderInSlot(ctx context.Context, u *url.URL, adm *limiter.Admission, _ limiter.HopAdmitter, _ downloader.RenderOptions) *downloader.Outcome {
	if err := adm.WaitWire(ctx); err != nil {
		return downloader.Failed(downloader.FailRenderTimeout)
	}
	select {
	case <-r.finish:
	case <-ctx.Done():
		return downloader.Failed(downloader.FailRenderTimeout)
	}
	n := 1
	return &downloader.Outcome{HTTPStatus: 200, RawTextLength: &n, TextLength: &n}
}

// TestQueuedRendersHoldNoGlobalSlot: renders waiting for the renderer's slot do not take
// max_concurrent_count's slots, so a plain probe still runs at once while the renderer is
// busy and its queue holds renders; a full render queue answers B with 429 and C with
// local_queue_full without touching the global cap.
func TestQueuedRendersHoldNoGlobalSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
		lim := limiter.New(clk)
		clk.Advance(time.Hour)
		gate := limiter.NewGate(2, 8)
		r := &slotRenderer{slots: limiter.NewGate(1, 3), finish: make(chan struct{})}
		e := New(Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: &recordingFetcher{clk: clk}, Renderer: r,
			DefaultMinInterval: time.Second, DefaultTimeout: 10 * time.Second})

		type result struct {
			res *downloader.Answer
			err error
		}
		done := make(chan result, 4)
		for i := range 4 {
			u, _ := url.Parse(fmt.Sprintf("http://r%d.test/", i))
			go func() {
				res, err := e.Render(t.Context(), downloader.Request{URL: u.String(), Domain: u.Hostname(), ShouldRender: true}, u)
				done <- result{res, err}
			}()
		}
		// Once every render is blocked, all four have reached the renderer: one rendering,
		// three queued. (An engine taking global slots first gets only two there.)
		synctest.Wait()
		if r.slots.InFlight() != 1 || r.slots.Waiting() != 3 {
			t.Fatalf("renders at the renderer: %d rendering, %d queued, global slots %d held; want 1, 3",
				r.slots.InFlight(), r.slots.Waiting(), gate.InFlight())
		}
		if n := gate.InFlight(); n != 1 {
			t.Errorf("global slots held with one render running and three queued = %d, want 1", n)
		}
		// The render queue is full: B is refused with 429 (local_queue_full), C with a summary.
		u, _ := url.Parse("http://r9.test/")
		if _, err := e.Render(t.Context(), downloader.Request{URL: u.String(), Domain: "r9.test", ShouldRender: true}, u); !isOverLimit(err, downloader.FailLocalQueueFull) {
			t.Errorf("render with the queue full: %v, want over limit local_queue_full", err)
		}
		u, _ = url.Parse("http://r10.test/")
		if s := e.Probe(t.Context(), downloader.Request{URL: u.String(), Domain: "r10.test", ShouldRender: true}, u); s.FailReason == nil || *s.FailReason != downloader.FailLocalQueueFull || s.HasReachedOrigin {
			t.Errorf("render probe with the queue full: %+v, want local_queue_full", s)
		}
		// A plain probe takes the free global slot and runs now.
		u, _ = url.Parse("http://plain.test/")
		if s := e.Probe(t.Context(), downloader.Request{URL: u.String(), Domain: "plain.test"}, u); s.FailReason != nil || s.HTTPStatus == nil || *s.HTTPStatus != 200 {
			t.Errorf("plain probe while renders queue: %+v, want a 200", s)
		}
		close(r.finish)
		for range 4 {
			if got := <-done; got.err != nil || got.res == nil {
				t.Errorf("queued render: %v", got.err)
			}
		}
		if gate.InFlight() != 0 || r.slots.InFlight() != 0 {
			t.Errorf("slots left held: global %d, render %d", gate.InFlight(), r.slots.InFlight())
		}
	})
}

func isOverLimit(err error, reason downloader.FailReason) bool {
	var ol *downloader.OverLimitError
	return errors.As(err, &ol) && ol.Reason == reason
}

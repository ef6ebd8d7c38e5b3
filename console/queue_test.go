package console

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"downloader/clock/clocktest"
	"downloader/engine"
	"downloader/internal/testkit"
	"downloader/limiter"
	"downloader/observe"
	"downloader/server"
)

// TestLocalQueuePanel: with a local queue the runtime page and its JSON show the queue's
// progress (states, discovered/fetched/remaining, retries, robots.txt skips, the ETA at the
// achieved rate); without one (a scheduler feeds entry A) local_queue is null and there is
// no panel.
func TestLocalQueuePanel(t *testing.T) {
	for _, hasQueue := range []bool{true, false} {
		clk := clocktest.NewFake(t0)
		lim := limiter.New(clk)
		clk.Advance(time.Hour)
		obs := observe.New(observe.Config{Clock: clk})
		gate := limiter.NewGate(8, 4)
		eng := engine.New(engine.Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: fetcher{clk},
			Settings: &testkit.SettingsStore{}, Observer: obs, DefaultMinInterval: time.Second})
		counts := observe.QueueCounts{PendingCount: 5, LeasedCount: 2, DoneCount: 12, SucceededCount: 10, FailedCount: 2,
			SkippedCount: 3, RetryCount: 4, PageCount: 10}
		con, err := New(Config{Clock: clk, Settings: eng, Limiter: lim, Gate: gate, Observer: obs,
			Domains: observe.NewDomainTable(lim, time.Nanosecond), Logger: slog.New(slog.DiscardHandler),
			LocalQueue: func() (observe.QueueCounts, bool) { return counts, hasQueue }})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(server.New(server.Config{Probe: eng, Render: eng, Settings: eng, Domains: lim, Slots: gate, Clock: clk, Extra: con.Register}))
		h := &harness{clk: clk, eng: eng, lim: lim, gate: gate, obs: obs, srv: srv}
		// Seven requests finish in the observer's first 7 s: 1 a second.
		for i := range 7 {
			h.post(t, "/v1/probe", `{"url":"http://q`+string(rune('a'+i))+`.test/","min_interval_ms":0}`)
		}
		clk.Advance(7 * time.Second)
		var rt map[string]any
		h.getJSON(t, "/v1/console/runtime", &rt)
		_, page := h.get(t, "/")
		srv.Close()
		if !hasQueue {
			if rt["local_queue"] != nil || strings.Contains(page, `id="local-queue"`) {
				t.Errorf("without a local queue: local_queue %v, panel shown %v", rt["local_queue"], strings.Contains(page, `id="local-queue"`))
			}
			continue
		}
		q, _ := rt["local_queue"].(map[string]any)
		want := map[string]float64{"discovered_count": 22, "fetched_count": 12, "remaining_count": 7, "skipped_count": 3,
			"retry_count": 4, "failed_count": 2, "achieved_rate_per_second": 1, "eta_seconds": 7}
		for k, w := range want {
			if q[k] != w {
				t.Errorf("local_queue.%s = %v, want %v", k, q[k], w)
			}
		}
		for _, cell := range []string{`data-field="discovered_count">22<`, `data-field="remaining_count">7<`, `data-field="skipped_count">3<`,
			`data-field="retry_count">4<`, `data-field="eta_seconds">7s<`} {
			if !strings.Contains(page, cell) {
				t.Errorf("the panel lacks %s", cell)
			}
		}
	}
}

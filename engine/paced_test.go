package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"downloader"
)

// eventLog records the engine's events.
type eventLog struct {
	mu  sync.Mutex
	evs []downloader.Event
}

func (l *eventLog) Observe(ev *downloader.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, *ev)
}

// TestPacedWaitIsNotOverLimit: a task of a self-pacing source (the local queue) that waits
// for its domain's slot is paced: a Paced event, no trigger, no over-limit state. The same
// wait of a scheduler's task is entry A's over-limit "delay" (SPEC §2).
func TestPacedWaitIsNotOverLimit(t *testing.T) {
	for _, tt := range []struct {
		name      string
		isPaced   bool
		wantState downloader.RateState
	}{
		{"local queue", true, downloader.RateStateNormal},
		{"scheduler", false, downloader.RateStateOverLimitA},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, clk, _, _ := newTestEngine(t)
			events := &eventLog{}
			e.cfg.Observer = events
			lease := clk.Now().Add(time.Minute)
			task := func(id string) *downloader.Task {
				return &downloader.Task{TaskID: id, URL: "http://a.test/" + id, MinIntervalMs: ms(500),
					LeaseExpiresAt: lease, IsPaced: tt.isPaced}
			}
			if out := e.RunTask(context.Background(), task("1")); out.Report == nil {
				t.Fatalf("first task: %+v", out)
			}
			done := make(chan downloader.LeaseReply)
			go func() { done <- e.RunTask(context.Background(), task("2")) }()
			clk.WaitTimers(1)
			clk.Advance(500 * time.Millisecond)
			if out := <-done; out.Report == nil || out.Report.FailReason != nil {
				t.Fatalf("second task: %+v", out)
			}
			var paced, over int
			for _, ev := range events.evs {
				if ev.Paced {
					paced++
				}
				if ev.OverLimit {
					over++
				}
			}
			wantPaced, wantOver := 0, 1
			if tt.isPaced {
				wantPaced, wantOver = 1, 0
			}
			if paced != wantPaced || over != wantOver {
				t.Errorf("paced events %d, over-limit events %d; want %d, %d", paced, over, wantPaced, wantOver)
			}
			if n := e.cfg.Limiter.Stats(clk.Now()).Trigger24hCount[downloader.EntryLease]; n != uint64(wantOver) {
				t.Errorf("entry A triggers = %d, want %d", n, wantOver)
			}
			if st, _ := e.cfg.Limiter.Domain(clk.Now(), "a.test"); st.State != tt.wantState {
				t.Errorf("state = %s, want %s", st.State, tt.wantState)
			}
		})
	}
}

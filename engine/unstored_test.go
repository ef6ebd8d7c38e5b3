package engine

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"downloader"
)

// judgeLog is an egress judge that records what it was asked and keeps the reason.
type judgeLog struct {
	mu      sync.Mutex
	domains []string
}

func (j *judgeLog) Judge(_ time.Time, domain string, _ downloader.Entry, reason downloader.FailReason, _ bool) downloader.FailReason {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.domains = append(j.domains, domain)
	return reason
}

// TestFetchUnstoredGoesThroughThePipeline: a request made for a task (robots.txt) takes
// the same steps as the task: the local slot (the task after it waits one interval), the
// shared admission of entry A (reserved), the egress verdict and the observers, with the
// task's task_id; and nothing is stored.
func TestFetchUnstoredGoesThroughThePipeline(t *testing.T) {
	e, clk, f, res := newTestEngine(t)
	sh := &fakeShared{}
	obs := &eventLog{}
	judge := &judgeLog{}
	e.cfg.Shared, e.cfg.Observer, e.cfg.Egress = sh, obs, judge
	u, _ := url.Parse("http://a.test/robots.txt")
	task := &downloader.Task{TaskID: "t1", URL: "http://a.test/page", MinIntervalMs: ms(500)}
	out, retryAfter := e.FetchUnstored(context.Background(), task, u, 500*time.Millisecond)
	if out == nil || out.HTTPStatus != 200 || string(out.Body) != "abc" || retryAfter != 0 {
		t.Fatalf("outcome %+v, retry after %v; want the 200 with its body", out, retryAfter)
	}
	if len(f.at) != 1 {
		t.Fatalf("fetched %d times, want once", len(f.at))
	}
	if len(sh.asks) != 1 || sh.asks[0].Domain != "a.test" || sh.asks[0].Entry != downloader.EntryLease || !sh.asks[0].Reserve {
		t.Errorf("shared admission asks %+v; want one of entry A for a.test, reserved", sh.asks)
	}
	if len(sh.ended()) != 1 {
		t.Errorf("shared tickets ended: %d, want 1", len(sh.ended()))
	}
	if len(judge.domains) != 1 || judge.domains[0] != "a.test" {
		t.Errorf("egress judge asked about %v, want a.test once", judge.domains)
	}
	if len(obs.evs) != 1 {
		t.Fatalf("events %+v, want one finished request", obs.evs)
	}
	if ev := obs.evs[0]; ev.Entry != downloader.EntryLease || ev.URL != u.String() || ev.TaskID != "t1" ||
		ev.OverLimit || ev.Summary.HTTPStatus == nil || *ev.Summary.HTTPStatus != 200 {
		t.Errorf("event %+v; want entry A's finished request of %s for t1", ev, u)
	}
	if len(res.rs) != 0 {
		t.Errorf("stored %+v; want nothing", res.rs)
	}
	// The slot it took is the domain's: the task after it reserves one interval later.
	adm, delay, ok := e.cfg.Limiter.Reserve(clk.Now(), "a.test", 500*time.Millisecond, downloader.IntervalSourceLease,
		downloader.EntryLease, time.Time{})
	adm.Cancel()
	if !ok || delay != 500*time.Millisecond {
		t.Errorf("the next request waits %v (ok %v), want the interval", delay, ok)
	}
}

// TestFetchUnstoredHandsBack: nothing is sent when the request would leave the task no
// time to run within its lease, or when the engine stops; the caller is told to come
// again.
func TestFetchUnstoredHandsBack(t *testing.T) {
	tests := []struct {
		name  string
		lease time.Duration // from now; the engine's timeout is 10 s
		stop  bool
	}{
		{"lease shorter than two timeouts", 15 * time.Second, false},
		{"stopping", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, clk, f, _ := newTestEngine(t)
			obs := &eventLog{}
			e.cfg.Observer = obs
			if tt.stop {
				e.Stop()
			}
			task := &downloader.Task{TaskID: "t1", URL: "http://a.test/page", MinIntervalMs: ms(0)}
			if tt.lease > 0 {
				task.LeaseExpiresAt = clk.Now().Add(tt.lease)
			}
			u, _ := url.Parse("http://a.test/robots.txt")
			out, retryAfter := e.FetchUnstored(context.Background(), task, u, 0)
			if out != nil || retryAfter <= 0 {
				t.Fatalf("outcome %+v, retry after %v; want nothing sent and a wait", out, retryAfter)
			}
			if len(f.at) != 0 || len(obs.evs) != 0 {
				t.Errorf("fetched %d, events %+v; want none", len(f.at), obs.evs)
			}
		})
	}
}

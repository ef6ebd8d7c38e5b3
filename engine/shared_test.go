package engine

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"downloader"
	"downloader/limiter"
)

// fakeShared is a SharedRuntime of function fields (nil Admit admits at once).
type fakeShared struct {
	AdmitFunc func(r downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error)

	mu      sync.Mutex
	asks    []downloader.SharedAdmit
	done    []time.Time // wireAt of every ended ticket
	wired   []time.Time // every Wired moment
	cap     int
	applied []int
}

var _ downloader.SharedRuntime = (*fakeShared)(nil)

func (f *fakeShared) Admit(ctx context.Context, r downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error) {
	f.mu.Lock()
	f.asks = append(f.asks, r)
	f.mu.Unlock()
	if f.AdmitFunc != nil {
		return f.AdmitFunc(r)
	}
	return f.ticket(), 0, nil
}

func (f *fakeShared) ticket() downloader.SharedTicket { return fakeTicket{f} }

func (f *fakeShared) MaxConcurrentCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cap
}

func (f *fakeShared) ApplyMaxConcurrentCount(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cap = n
	f.applied = append(f.applied, n)
}

func (f *fakeShared) ended() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.done...)
}

type fakeTicket struct{ f *fakeShared }

func (t fakeTicket) Wired(at time.Time) {
	t.f.mu.Lock()
	t.f.wired = append(t.f.wired, at)
	t.f.mu.Unlock()
}

func (t fakeTicket) Done(ctx context.Context, wireAt time.Time) {
	t.f.mu.Lock()
	t.f.done = append(t.f.done, wireAt)
	t.f.mu.Unlock()
}

var errStoreDown = errors.New("tikv down (test)")

func TestSharedAdmissionPerEntry(t *testing.T) {
	refuse := func(downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error) {
		return nil, 1500 * time.Millisecond, nil
	}
	fail := func(downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error) {
		return nil, 0, errStoreDown
	}
	tests := []struct {
		name   string
		entry  downloader.Entry
		admit  func(downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error)
		reason downloader.FailReason // "" : sent
		b503   bool
	}{
		{"B admitted", downloader.EntryRender, nil, "", false},
		{"C admitted", downloader.EntryProbe, nil, "", false},
		{"B refused elsewhere", downloader.EntryRender, refuse, downloader.FailSelfRateLimited, false},
		{"C refused elsewhere", downloader.EntryProbe, refuse, downloader.FailSelfRateLimited, false},
		{"B store down", downloader.EntryRender, fail, downloader.FailRuntimeStoreUnavailable, true},
		{"C store down", downloader.EntryProbe, fail, downloader.FailRuntimeStoreUnavailable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, clk, f, _ := newTestEngine(t)
			sh := &fakeShared{AdmitFunc: tt.admit}
			e.cfg.Shared = sh
			u, _ := url.Parse("http://a.test/")
			req := downloader.Request{URL: u.String(), Domain: "a.test", MinInterval: time.Second,
				IntervalSource: downloader.IntervalSourceRequest}
			var s downloader.Summary
			var err error
			if tt.entry == downloader.EntryProbe {
				s = e.Probe(context.Background(), req, u)
			} else {
				var res *downloader.Answer
				res, err = e.Render(context.Background(), req, u)
				if res != nil {
					s = res.Summary
				}
			}
			if len(sh.asks) != 1 || sh.asks[0].Domain != "a.test" || sh.asks[0].Reserve || sh.asks[0].Timeout != 10*time.Second {
				t.Fatalf("asks = %+v", sh.asks)
			}
			switch {
			case tt.reason == "":
				if err != nil || len(f.at) != 1 || s.FailReason != nil {
					t.Fatalf("summary %+v, err %v, fetched %d", s, err, len(f.at))
				}
				ended := sh.ended()
				if len(ended) != 1 || !ended[0].Equal(f.at[0]) {
					t.Errorf("ticket ended with %v; want the wire moment %v", ended, f.at[0])
				}
				sh.mu.Lock()
				wired := sh.wired
				sh.mu.Unlock()
				if len(wired) != 1 || !wired[0].Equal(f.at[0]) {
					t.Errorf("ticket told Wired %v; want once, the wire moment %v", wired, f.at[0])
				}
				return
			case tt.b503:
				if downloader.ErrorCode(err) != downloader.EUNAVAILABLE {
					t.Fatalf("err = %v; want EUNAVAILABLE (503)", err)
				}
			case tt.entry == downloader.EntryRender:
				var ol *downloader.OverLimitError
				if !errors.As(err, &ol) || ol.Reason != tt.reason || ol.RetryAfterSeconds() != 2 {
					t.Fatalf("err = %v; want 429 %s after 2 s", err, tt.reason)
				}
			default:
				if s.FailReason == nil || *s.FailReason != tt.reason || s.HasReachedOrigin || s.HTTPStatus != nil {
					t.Fatalf("summary = %+v; want %s, not reached", s, tt.reason)
				}
				// Our limiter's refusal tells the wait (health_signal.retry_after_seconds);
				// a full queue, nothing.
				if hs := s.HealthSignal; tt.reason == downloader.FailSelfRateLimited &&
					(hs == nil || hs.RetryAfterSeconds == nil || *hs.RetryAfterSeconds != 2) ||
					tt.reason != downloader.FailSelfRateLimited && hs != nil {
					t.Fatalf("health_signal = %+v; want retry_after_seconds 2 for self_rate_limited, else null", hs)
				}
			}
			if len(f.at) != 0 {
				t.Errorf("a request refused cluster-wide was sent")
			}
			// The local admission was given back: the domain is free locally at once.
			if _, wait := e.cfg.Limiter.Allow(clk.Now(), "a.test", time.Second, downloader.IntervalSourceRequest, downloader.EntryRender); wait != 0 {
				t.Errorf("local slot still taken (wait %v)", wait)
			}
			if e.cfg.Gate.InFlight() != 0 {
				t.Errorf("gate in flight = %d", e.cfg.Gate.InFlight())
			}
		})
	}
}

// TestSharedLocalRefusalAsksNothing: the local fast path refuses without asking the
// shared runtime.
func TestSharedLocalRefusalAsksNothing(t *testing.T) {
	e, _, _, _ := newTestEngine(t)
	sh := &fakeShared{}
	e.cfg.Shared = sh
	u, _ := url.Parse("http://a.test/")
	req := downloader.Request{URL: u.String(), Domain: "a.test", MinInterval: time.Minute}
	e.Probe(context.Background(), req, u)
	s := e.Probe(context.Background(), req, u)
	if s.FailReason == nil || *s.FailReason != downloader.FailSelfRateLimited {
		t.Fatalf("second probe = %+v", s)
	}
	if len(sh.asks) != 1 {
		t.Errorf("shared runtime asked %d times; want 1 (the local refusal asks nothing)", len(sh.asks))
	}
}

func TestSharedTaskWaitsForTheStoreAndTheSlot(t *testing.T) {
	e, clk, f, _ := newTestEngine(t)
	sh := &fakeShared{}
	var mu sync.Mutex
	calls := 0
	sh.AdmitFunc = func(r downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch calls {
		case 1, 2:
			return nil, 0, errStoreDown // A waits while the store is down
		case 3:
			return nil, 300 * time.Millisecond, nil // busy elsewhere: ask again
		}
		return sh.ticket(), 200 * time.Millisecond, nil // a reserved slot ahead
	}
	e.cfg.Shared = sh
	lease := clk.Now().Add(time.Hour)
	done := make(chan downloader.LeaseReply)
	go func() {
		done <- e.RunTask(context.Background(), &downloader.Task{TaskID: "1", URL: "http://a.test/", MinIntervalMs: ms(100), LeaseExpiresAt: lease})
	}()
	start := clk.Now()
	for _, d := range []time.Duration{sharedRetryMin, 2 * sharedRetryMin, 300 * time.Millisecond, 200 * time.Millisecond} {
		clk.WaitTimers(1)
		clk.Advance(d)
	}
	out := <-done
	if out.Report == nil || out.Report.FailReason != nil {
		t.Fatalf("outcome = %+v", out)
	}
	if len(f.at) != 1 || f.at[0].Sub(start) != 800*time.Millisecond {
		t.Errorf("sent at %v; want 800ms after the start", f.at)
	}
	for _, a := range sh.asks {
		if !a.Reserve || !a.Deadline.Equal(lease.Add(-10*time.Second)) {
			t.Errorf("ask %+v: want a reservation bounded by the lease", a)
		}
	}
	if len(sh.ended()) != 1 {
		t.Errorf("tickets ended: %d", len(sh.ended()))
	}
}

func TestSharedTaskReleasedPastTheLease(t *testing.T) {
	e, clk, f, _ := newTestEngine(t)
	e.cfg.Shared = &fakeShared{AdmitFunc: func(downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error) {
		return nil, time.Minute, nil
	}}
	out := e.RunTask(context.Background(), &downloader.Task{TaskID: "1", URL: "http://a.test/", MinIntervalMs: ms(100),
		LeaseExpiresAt: clk.Now().Add(30 * time.Second)})
	if !out.Release || out.RetryAfterSeconds() != 60 || len(f.at) != 0 {
		t.Fatalf("outcome = %+v (fetched %d); want a release after 60 s", out, len(f.at))
	}
	if e.cfg.Gate.InFlight() != 0 {
		t.Errorf("gate in flight = %d", e.cfg.Gate.InFlight())
	}
}

func TestSharedSettings(t *testing.T) {
	e, _, _, _ := newTestEngine(t)
	sh := &fakeShared{cap: 30}
	e.cfg.Shared = sh
	if got := e.Settings().MaxConcurrentCount; got != 30 {
		t.Errorf("settings = %d; want the cluster's 30", got)
	}
	if _, err := e.SetSettings(context.Background(), downloader.Settings{MaxConcurrentCount: 12}, "test"); err != nil {
		t.Fatal(err)
	}
	if sh.MaxConcurrentCount() != 12 || e.cfg.Gate.Capacity() != 8 {
		t.Errorf("cluster cap %d, gate %d; want 12 applied through the shared runtime, the gate left to it",
			sh.MaxConcurrentCount(), e.cfg.Gate.Capacity())
	}
}

func TestSharedHopsEndWithTheRequest(t *testing.T) {
	e, clk, _, _ := newTestEngine(t)
	sh := &fakeShared{}
	e.cfg.Shared = sh
	var hopWire time.Time
	e.cfg.Fetcher = fetcherFunc(func(ctx context.Context, u *url.URL, adm *limiter.Admission, hops limiter.HopAdmitter) *downloader.Outcome {
		if err := adm.WaitWire(ctx); err != nil {
			t.Error(err)
		}
		a, err := hops.AdmitHop(ctx, "b.test")
		if err != nil {
			t.Fatalf("AdmitHop: %v", err)
		}
		clk.Advance(0) // b.test is new: its slot is now
		if d := a.Wire(clk.Now()); d != 0 {
			t.Errorf("hop wire wait %v", d)
		}
		hopWire = clk.Now()
		a.Cancel()
		if n := len(sh.ended()); n != 0 {
			t.Errorf("hop ticket ended before the request did (%d)", n)
		}
		return &downloader.Outcome{HTTPStatus: 200}
	})
	u, _ := url.Parse("http://a.test/")
	e.Probe(context.Background(), downloader.Request{URL: u.String(), Domain: "a.test"}, u)
	if len(sh.asks) != 2 || sh.asks[1].Domain != "b.test" || !sh.asks[1].Reserve {
		t.Fatalf("asks = %+v; want a.test then a reserved hop to b.test", sh.asks)
	}
	ended := sh.ended()
	if len(ended) != 2 || ended[0].Before(hopWire) {
		t.Errorf("ended = %v; want both tickets, the hop's no earlier than its wire moment %v", ended, hopWire)
	}
}

// fakeDeadline is ctx with a deadline on the test's fake clock (a real context deadline
// would be on the real one).
type fakeDeadline struct {
	context.Context
	at time.Time
}

func (c fakeDeadline) Deadline() (time.Time, bool) { return c.at, true }

// TestSharedHopUnavailable: a redirect hop whose shared admission cannot reach the store
// before its deadline fails with an EUNAVAILABLE error (fetch: runtime_store_unavailable),
// and a request whose hop was refused so reports runtime_store_unavailable, not reached,
// whatever the fetcher or renderer made of the refusal (the renderer says
// self_rate_limited for any refused hop).
func TestSharedHopUnavailable(t *testing.T) {
	e, clk, _, _ := newTestEngine(t)
	sh := &fakeShared{}
	sh.AdmitFunc = func(r downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error) {
		if r.Domain == "b.test" {
			return nil, 0, errStoreDown
		}
		return sh.ticket(), 0, nil
	}
	e.cfg.Shared = sh
	var hopErr error
	e.cfg.Fetcher = fetcherFunc(func(ctx context.Context, u *url.URL, adm *limiter.Admission, hops limiter.HopAdmitter) *downloader.Outcome {
		if err := adm.WaitWire(ctx); err != nil {
			t.Error(err)
		}
		// The store stays down: a first pause (100 ms), then the next would pass the
		// hop's deadline (150 ms).
		go func() {
			clk.WaitTimers(1)
			clk.Advance(sharedRetryMin)
		}()
		_, hopErr = hops.AdmitHop(fakeDeadline{ctx, clk.Now().Add(150 * time.Millisecond)}, "b.test")
		return downloader.Failed(downloader.FailSelfRateLimited) // as render reports a refused hop
	})
	u, _ := url.Parse("http://a.test/")
	s := e.Probe(context.Background(), downloader.Request{URL: u.String(), Domain: "a.test", MinInterval: time.Second}, u)
	if downloader.ErrorCode(hopErr) != downloader.EUNAVAILABLE || !errors.Is(hopErr, errStoreDown) {
		t.Errorf("hop error = %v; want EUNAVAILABLE wrapping the store's error", hopErr)
	}
	if s.FailReason == nil || *s.FailReason != downloader.FailRuntimeStoreUnavailable || s.HasReachedOrigin {
		t.Errorf("summary = %+v; want runtime_store_unavailable, not reached", s)
	}
	if n := len(sh.asks); n != 3 {
		t.Errorf("asked %d times; want a.test, then b.test twice", n)
	}
	// A hop refused by the limit itself (busy elsewhere past the deadline) stays ours.
	sh.AdmitFunc = func(r downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error) {
		if r.Domain == "b.test" {
			return nil, time.Minute, nil
		}
		return sh.ticket(), 0, nil
	}
	clk.Advance(time.Hour)
	e.cfg.Fetcher = fetcherFunc(func(ctx context.Context, u *url.URL, adm *limiter.Admission, hops limiter.HopAdmitter) *downloader.Outcome {
		_ = adm.WaitWire(ctx)
		_, hopErr = hops.AdmitHop(fakeDeadline{ctx, clk.Now().Add(150 * time.Millisecond)}, "b.test")
		return downloader.Failed(downloader.FailSelfRateLimited)
	})
	s = e.Probe(context.Background(), downloader.Request{URL: u.String(), Domain: "a.test", MinInterval: time.Second}, u)
	if !errors.Is(hopErr, context.DeadlineExceeded) || downloader.ErrorCode(hopErr) == downloader.EUNAVAILABLE {
		t.Errorf("hop error = %v; want the deadline", hopErr)
	}
	if s.FailReason == nil || *s.FailReason != downloader.FailSelfRateLimited {
		t.Errorf("summary = %+v; want self_rate_limited", s)
	}
}

// deadlineFetcher records how much time the request's context left it.
type deadlineFetcher struct {
	mu   sync.Mutex
	left []time.Duration
}

func (f *deadlineFetcher) FetchWith(ctx context.Context, u *url.URL, adm *limiter.Admission, _ limiter.HopAdmitter, _ downloader.FetchOptions) *downloader.Outcome {
	if d, ok := ctx.Deadline(); ok {
		f.mu.Lock()
		f.left = append(f.left, time.Until(d))
		f.mu.Unlock()
	}
	return downloader.Failed(downloader.FailResponseTimeout)
}

// TestSharedAdmissionTimeCountsAgainstTheRequest: in cluster mode a request's time runs
// from its shared admission, not from when the engine got round to sending it: its
// in-flight entry expires for the other instances at slot + timeout + slack, and a request
// that went out later could reach the origin after another instance's. A shared admission
// that took 600 ms of a 1 s timeout leaves the request 400 ms, for B and C alike, and one
// that took the whole timeout leaves it nothing.
func TestSharedAdmissionTimeCountsAgainstTheRequest(t *testing.T) {
	for _, tt := range []struct {
		took    time.Duration
		maxLeft time.Duration
	}{
		{600 * time.Millisecond, 400 * time.Millisecond},
		{1500 * time.Millisecond, 0},
	} {
		e, clk, _, _ := newTestEngine(t)
		f := &deadlineFetcher{}
		e.cfg.Fetcher = f
		e.cfg.DefaultTimeout = time.Second
		e.cfg.Shared = &fakeShared{AdmitFunc: func(downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error) {
			clk.Advance(tt.took) // the transaction's time
			return fakeTicket{&fakeShared{}}, 0, nil
		}}
		clk.Advance(2 * time.Second)
		for i, entry := range []downloader.Entry{downloader.EntryProbe, downloader.EntryRender} {
			d := fmt.Sprintf("d%d.test", i)
			u, _ := url.Parse("http://" + d + "/")
			req := downloader.Request{URL: u.String(), Domain: d, MinInterval: time.Second, IntervalSource: downloader.IntervalSourceRequest}
			if entry == downloader.EntryProbe {
				e.Probe(t.Context(), req, u)
			} else if _, err := e.Render(t.Context(), req, u); err != nil {
				t.Fatalf("render: %v", err)
			}
		}
		if len(f.left) != 2 {
			t.Fatalf("admission took %v: %d requests ran, want 2", tt.took, len(f.left))
		}
		for _, left := range f.left {
			if left > tt.maxLeft {
				t.Errorf("admission took %v of a 1 s timeout: the request had %v left, want at most %v", tt.took, left, tt.maxLeft)
			}
		}
	}
}

func TestEvenShare(t *testing.T) {
	live := []string{"a", "b", "c"}
	for _, tc := range []struct {
		capacity int
		id       string
		want     int
	}{
		{10, "a", 4}, {10, "b", 3}, {10, "c", 3}, {2, "a", 1}, {2, "b", 1}, {2, "c", 0}, {10, "z", 0},
	} {
		if got := EvenShare(tc.capacity, live, tc.id); got != tc.want {
			t.Errorf("EvenShare(%d, %s) = %d; want %d", tc.capacity, tc.id, got, tc.want)
		}
	}
}

package engine

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/limiter"
)

// recordingFetcher goes on the wire (waiting as the limiter says), records the clock at
// each wire moment, and answers what answer gives for the URL (nil: a 200 of three bytes).
type recordingFetcher struct {
	clk    *clocktest.Fake
	answer func(u *url.URL) *downloader.Outcome
	mu     sync.Mutex
	at     []time.Time
}

func (f *recordingFetcher) FetchWith(ctx context.Context, u *url.URL, adm *limiter.Admission, _ limiter.HopAdmitter, _ downloader.FetchOptions) *downloader.Outcome {
	if err := adm.WaitWire(ctx); err != nil {
		return downloader.FailedBy(downloader.CauseWireWaitFailed)
	}
	f.mu.Lock()
	f.at = append(f.at, f.clk.Now())
	f.mu.Unlock()
	if f.answer != nil {
		return f.answer(u)
	}
	n := 3
	return &downloader.Outcome{HTTPStatus: 200, RawTextLength: &n, Body: []byte("abc")}
}

// wires returns the wire moments so far.
func (f *recordingFetcher) wires() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.at...)
}

type recordingResults struct {
	mu sync.Mutex
	rs []downloader.FetchResult
}

func (r *recordingResults) PutFetchResult(_ context.Context, fr *downloader.FetchResult) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rs = append(r.rs, *fr)
	return nil
}

func (r *recordingResults) FetchResults(context.Context, string, int, string) ([]downloader.FetchResult, string, error) {
	return nil, "", nil
}

// newTestEngine is an engine on a fake clock an hour after its limiter's start (every
// domain's first turn is now), with a default interval of 1 s, its fetcher answering 200.
func newTestEngine(t *testing.T) (*Engine, *clocktest.Fake, *recordingFetcher, *recordingResults) {
	t.Helper()
	return newEngineAnswering(t, nil, time.Second)
}

// newEngineAnswering is newTestEngine with the fetcher's answer (nil: 200) and the default
// interval given.
func newEngineAnswering(t *testing.T, answer func(u *url.URL) *downloader.Outcome, defaultInterval time.Duration) (*Engine, *clocktest.Fake, *recordingFetcher, *recordingResults) {
	t.Helper()
	clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
	lim := limiter.New(clk)
	clk.Advance(time.Hour)
	f := &recordingFetcher{clk: clk, answer: answer}
	res := &recordingResults{}
	e := New(Config{Clock: clk, Limiter: lim, Gate: limiter.NewGate(8, 8), Fetcher: f, Results: res,
		DefaultMinInterval: defaultInterval, DefaultTimeout: 10 * time.Second})
	return e, clk, f, res
}

func ms(n int64) *int64 { return &n }

func TestValidateTask(t *testing.T) {
	tests := []struct {
		name  string
		task  downloader.Task
		field string
	}{
		{"ok", downloader.Task{URL: "http://a.test/x", Domain: "A.test", MinIntervalMs: ms(100)}, ""},
		{"ok without domain", downloader.Task{URL: "http://a.test/x", MinIntervalMs: ms(0)}, ""},
		{"bad url", downloader.Task{URL: "::nope", MinIntervalMs: ms(100)}, "url"},
		{"no interval", downloader.Task{URL: "http://a.test/"}, "min_interval_ms"},
		{"negative interval", downloader.Task{URL: "http://a.test/", MinIntervalMs: ms(-5)}, "min_interval_ms"},
		{"interval above one hour", downloader.Task{URL: "http://a.test/", MinIntervalMs: ms(3_600_001)}, "min_interval_ms"},
		{"domain not host", downloader.Task{URL: "http://a.test/", Domain: "b.test", MinIntervalMs: ms(100)}, "domain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, req, err := ValidateTask(&tt.task)
			if got := downloader.ErrorField(err); got != tt.field {
				t.Fatalf("field = %q, want %q (err %v)", got, tt.field, err)
			}
			if err == nil && (req.IntervalSource != downloader.IntervalSourceLease || req.Domain != "a.test") {
				t.Errorf("request = %+v", req)
			}
		})
	}
}

func TestRunTaskInvalidIsReportedNotFetched(t *testing.T) {
	e, _, f, res := newTestEngine(t)
	out := runAndStore(t, context.Background(), e, &downloader.Task{TaskID: "t1", URL: "http://a.test/", Domain: "b.test", MinIntervalMs: ms(1)})
	if out.Report == nil || out.Release {
		t.Fatalf("outcome = %+v", out)
	}
	if fr := out.Report.FailReason; fr == nil || *fr != downloader.FailInvalidTask || out.Report.HasReachedOrigin {
		t.Errorf("report = %+v", out.Report)
	}
	if len(f.at) != 0 {
		t.Errorf("invalid task was fetched")
	}
	if len(res.rs) != 1 || res.rs[0].TaskID != "t1" {
		t.Errorf("fetch_result not written: %+v", res.rs)
	}
}

func TestRunTaskDelaysToItsSlot(t *testing.T) {
	e, clk, f, _ := newTestEngine(t)
	lease := clk.Now().Add(time.Minute)
	task := func(id string) *downloader.Task {
		return &downloader.Task{TaskID: id, URL: "http://a.test/" + id, MinIntervalMs: ms(500), LeaseExpiresAt: lease}
	}
	if out := e.RunTask(context.Background(), task("1")); out.Report == nil {
		t.Fatalf("first task: %+v", out)
	}
	done := make(chan downloader.LeaseReply)
	go func() { done <- e.RunTask(context.Background(), task("2")) }()
	clk.WaitTimers(1)
	clk.Advance(499 * time.Millisecond)
	select {
	case out := <-done:
		t.Fatalf("second task ran before its slot: %+v", out)
	default:
	}
	clk.Advance(time.Millisecond)
	out := <-done
	if out.Report == nil || out.Report.FailReason != nil {
		t.Fatalf("second task: %+v", out)
	}
	if gap := f.at[1].Sub(f.at[0]); gap != 500*time.Millisecond {
		t.Errorf("gap between wire moments = %v, want 500ms", gap)
	}
	if st := e.cfg.Limiter.Stats(clk.Now()); st.Trigger24hCount[downloader.EntryLease] != 1 {
		t.Errorf("entry A triggers = %d, want 1", st.Trigger24hCount[downloader.EntryLease])
	}
}

func TestRunTaskReleasesWhenTheWaitOutlivesTheLease(t *testing.T) {
	e, clk, f, _ := newTestEngine(t)
	first := &downloader.Task{TaskID: "1", URL: "http://slow.test/", MinIntervalMs: ms(60_000), LeaseExpiresAt: clk.Now().Add(time.Hour)}
	if out := e.RunTask(context.Background(), first); out.Report == nil {
		t.Fatal("first task did not run")
	}
	// The next slot is in 60 s; the lease ends in 30 s.
	second := &downloader.Task{TaskID: "2", URL: "http://slow.test/2", MinIntervalMs: ms(60_000), LeaseExpiresAt: clk.Now().Add(30 * time.Second)}
	out := e.RunTask(context.Background(), second)
	if !out.Release || out.Report != nil {
		t.Fatalf("outcome = %+v, want release", out)
	}
	if out.RetryAfterSeconds() != 60 {
		t.Errorf("retry_after_seconds = %d, want 60", out.RetryAfterSeconds())
	}
	if len(f.at) != 1 {
		t.Errorf("released task was fetched")
	}
	// Releasing left the domain's slot where it was.
	st, _ := e.cfg.Limiter.Domain(clk.Now(), "slow.test")
	if st.InFlightCount != 0 {
		t.Errorf("in_flight_count = %d", st.InFlightCount)
	}
}

func TestStopAnswersShuttingDown(t *testing.T) {
	e, _, _, _ := newTestEngine(t)
	e.Stop()
	u, _ := url.Parse("http://a.test/")
	s := e.Probe(context.Background(), downloader.Request{URL: u.String(), Domain: "a.test"}, u)
	if s.FailReason == nil || *s.FailReason != downloader.FailShuttingDown || s.HasReachedOrigin {
		t.Errorf("probe while stopping: %+v", s)
	}
	out := e.RunTask(context.Background(), &downloader.Task{TaskID: "x", URL: "http://a.test/", MinIntervalMs: ms(0)})
	if !out.Release {
		t.Errorf("task while stopping: %+v, want release", out)
	}
}

func TestRenderAnswersTheTextOfAPlainFetch(t *testing.T) {
	e, _, _, _ := newTestEngine(t)
	e.cfg.Fetcher = fetcherFunc(func(ctx context.Context, u *url.URL, adm *limiter.Admission, hops limiter.HopAdmitter) *downloader.Outcome {
		return &downloader.Outcome{HTTPStatus: 200, HealthSignal: downloader.HealthSignal{ContentType: "text/html"},
			Body: []byte("<html><head><title>t</title></head><body><p>Hello <b>world</b></p><script>x()</script></body></html>")}
	})
	u, _ := url.Parse("http://a.test/")
	res, err := e.Render(context.Background(), downloader.Request{URL: u.String(), Domain: "a.test"}, u)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome.Text != "Hello world" {
		t.Errorf("text = %q, want %q", res.Outcome.Text, "Hello world")
	}
}

type fetcherFunc func(ctx context.Context, u *url.URL, adm *limiter.Admission, hops limiter.HopAdmitter) *downloader.Outcome

func (f fetcherFunc) FetchWith(ctx context.Context, u *url.URL, adm *limiter.Admission, hops limiter.HopAdmitter, _ downloader.FetchOptions) *downloader.Outcome {
	return f(ctx, u, adm, hops)
}

// onceFetcher records which requests asked for FetchOptions.IsOnce.
type onceFetcher struct {
	mu    sync.Mutex
	calls []string
}

func (f *onceFetcher) record(how string) *downloader.Outcome {
	f.mu.Lock()
	f.calls = append(f.calls, how)
	f.mu.Unlock()
	return &downloader.Outcome{HTTPStatus: 200, Body: []byte("abc")}
}

func (f *onceFetcher) FetchWith(_ context.Context, _ *url.URL, _ *limiter.Admission, _ limiter.HopAdmitter, opts downloader.FetchOptions) *downloader.Outcome {
	if opts.IsOnce {
		return f.record("once")
	}
	return f.record("fetch")
}

// TestProbeFetchesOnce: an entry C probe keeps no connection for later (FetchOnce); entry A
// and B fetch as usual.
func TestProbeFetchesOnce(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
	lim := limiter.New(clk)
	clk.Advance(time.Hour)
	f := &onceFetcher{}
	e := New(Config{Clock: clk, Limiter: lim, Gate: limiter.NewGate(8, 8), Fetcher: f,
		DefaultMinInterval: time.Second, DefaultTimeout: 10 * time.Second})
	u, _ := url.Parse("http://p.test/")
	e.Probe(t.Context(), downloader.Request{URL: u.String(), Domain: "p.test"}, u)
	u2, _ := url.Parse("http://r.test/")
	if _, err := e.Render(t.Context(), downloader.Request{URL: u2.String(), Domain: "r.test"}, u2); err != nil {
		t.Fatal(err)
	}
	e.RunTask(t.Context(), &downloader.Task{TaskID: "a", URL: "http://a.test/", MinIntervalMs: ms(0)})
	if got := fmt.Sprint(f.calls); got != "[once fetch fetch]" {
		t.Errorf("calls %s, want [once fetch fetch]", got)
	}
}

// optsFetcher records the options of every fetch.
type optsFetcher struct {
	mu   sync.Mutex
	opts []downloader.FetchOptions
}

func (f *optsFetcher) FetchWith(_ context.Context, _ *url.URL, _ *limiter.Admission, _ limiter.HopAdmitter, opts downloader.FetchOptions) *downloader.Outcome {
	f.mu.Lock()
	f.opts = append(f.opts, opts)
	f.mu.Unlock()
	return &downloader.Outcome{HTTPStatus: 200, Body: []byte("abc")}
}

// TestRequestHeadersReachTheFetcher: the service's default headers go with every entry's
// request, a request's own header of the same name wins, and a leased task's headers are
// checked under the service's policy (a User-Agent the operator did not allow is
// invalid_task, never fetched).
func TestRequestHeadersReachTheFetcher(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
	lim := limiter.New(clk)
	clk.Advance(time.Hour)
	f := &optsFetcher{}
	e := New(Config{Clock: clk, Limiter: lim, Gate: limiter.NewGate(8, 8), Fetcher: f,
		DefaultMinInterval: time.Second, DefaultTimeout: 10 * time.Second,
		DefaultRequestHeaders: downloader.RequestHeaders{"Accept-Language": "en", "Cookie": "d=1"}})
	u, _ := url.Parse("http://r.test/")
	if _, err := e.Render(t.Context(), downloader.Request{URL: u.String(), Domain: "r.test",
		Headers: downloader.RequestHeaders{"Cookie": "c=2"}}, u); err != nil {
		t.Fatal(err)
	}
	p, _ := url.Parse("http://p.test/")
	e.Probe(t.Context(), downloader.Request{URL: p.String(), Domain: "p.test"}, p)
	reply := e.RunTask(t.Context(), &downloader.Task{TaskID: "a", URL: "http://a.test/", MinIntervalMs: ms(0),
		RequestHeaders: downloader.RequestHeaders{"accept-language": "ja"}})
	if reply.Report == nil || reply.Report.FailReason != nil {
		t.Fatalf("task reply %+v", reply)
	}
	bad := e.RunTask(t.Context(), &downloader.Task{TaskID: "b", URL: "http://b.test/", MinIntervalMs: ms(0),
		RequestHeaders: downloader.RequestHeaders{"User-Agent": "me"}})
	if bad.Report == nil || bad.Report.FailReason == nil || *bad.Report.FailReason != downloader.FailInvalidTask {
		t.Fatalf("a task with a User-Agent the operator did not allow: %+v, want invalid_task", bad)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	want := []downloader.FetchOptions{
		{Headers: downloader.RequestHeaders{"Accept-Language": "en", "Cookie": "c=2"}},
		{Headers: downloader.RequestHeaders{"Accept-Language": "en", "Cookie": "d=1"}, IsOnce: true},
		{Headers: downloader.RequestHeaders{"Accept-Language": "ja", "Cookie": "d=1"}},
	}
	if got, w := fmt.Sprint(f.opts), fmt.Sprint(want); got != w {
		t.Errorf("fetch options %s, want %s", got, w)
	}
}

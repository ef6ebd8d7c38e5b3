package robots

import (
	"context"
	"downloader/clock/clocktest"
	"downloader/internal/testkit"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"downloader"
	"downloader/clock"
	"downloader/engine"
	"downloader/fetch"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/origintest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is the runner Runner wraps: it records the tasks it was given.
type recorder struct {
	mu    sync.Mutex
	tasks []downloader.Task
}

func (r *recorder) RunTask(_ context.Context, t *downloader.Task) downloader.LeaseReply {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tasks = append(r.tasks, *t)
	st := 200
	return downloader.LeaseReply{Report: &downloader.Report{TaskID: t.TaskID, Summary: downloader.Summary{HTTPStatus: &st, HasReachedOrigin: true}}}
}

func (r *recorder) Stop() {}

func (r *recorder) ran() map[string]downloader.Task {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]downloader.Task{}
	for _, t := range r.tasks {
		m[t.URL] = t
	}
	return m
}

type loopbackDialer struct{}

func (loopbackDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return nil, errors.New("test dialer: loopback only")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

type rig struct {
	origin *origintest.Origin
	clk    clock.Clock
	lim    *limiter.Limiter
	next   *recorder
	runner *Runner
	delays sync.Map // domain → Crawl-delay told to the queue
	events *events
}

// newEngine is the engine the robots.txt requests go through (the runner's Fetcher); the
// runner it wraps is the recorder, so that only robots.txt reaches the origin.
func newEngine(clk clock.Clock, lim *limiter.Limiter, f *fetch.Fetcher, obs downloader.Observer) *engine.Engine {
	return engine.New(engine.Config{Clock: clk, Limiter: lim, Gate: limiter.NewGate(4, 4), Fetcher: f,
		Observer: obs, DefaultMinInterval: time.Second, DefaultTimeout: 5 * time.Second})
}

// events records what the engine tells its observers.
type events struct {
	mu  sync.Mutex
	all []downloader.Event
}

func (e *events) Observe(ev *downloader.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, *ev)
}

func (e *events) list() []downloader.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]downloader.Event(nil), e.all...)
}

// robotsFiles is what each test host answers at /robots.txt: a status and a body.
var robotsFiles = map[string]struct {
	status int
	body   string
}{
	"rules.test": {200, "User-agent: *\nDisallow: /\n\nUser-agent: Downloader\nDisallow: /private\nAllow: /private/open\nCrawl-delay: 2\n"},
	"star.test":  {200, "User-agent: *\nDisallow: /\n"},
	"empty.test": {200, ""},
	"gone.test":  {404, "not found"},
	"auth.test":  {403, "forbidden"},
	"down.test":  {503, "unavailable"},
	"busy.test":  {429, "slow down"},
}

func newRig(t *testing.T, clk clock.Clock) *rig {
	t.Helper()
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(r.Host); err == nil {
			host = h
		}
		if f, ok := robotsFiles[host]; ok && r.URL.Path == "/robots.txt" {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(f.status)
			_, _ = w.Write([]byte(f.body))
			return
		}
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		origintest.Page(w, r)
	}))
	t.Cleanup(origin.Close)
	rule, err := netguard.ParseConnectTo(origin.ConnectTo())
	if err != nil {
		t.Fatal(err)
	}
	guard := netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}, Dialer: loopbackDialer{}, Resolver: testkit.NoResolver{}})
	lim := limiter.New(clk)
	f := fetch.New(fetch.Config{Clock: clk, Guard: guard})
	t.Cleanup(f.Close)
	rg := &rig{origin: origin, clk: clk, lim: lim, next: &recorder{}, events: &events{}}
	eng := newEngine(clk, lim, f, rg.events)
	rg.runner, err = New(Config{Next: rg.next, Fetcher: eng, Clock: clk,
		UserAgent:  "downloader/1.0 (+https://example.invalid/crawler)",
		CrawlDelay: func(d string, cd time.Duration) { rg.delays.Store(d, cd) }})
	if err != nil {
		t.Fatal(err)
	}
	return rg
}

func task(id, u string, intervalMs int64) *downloader.Task {
	return &downloader.Task{TaskID: id, URL: u, MinIntervalMs: &intervalMs}
}

// robotsRequests counts the /robots.txt requests each host received.
func (r *rig) robotsRequests() map[string]int {
	m := map[string]int{}
	for _, a := range r.origin.Arrivals() {
		if a.Path == "/robots.txt" {
			m[a.Host]++
		}
	}
	return m
}

func (r *rig) pageRequests() []string {
	var out []string
	for _, a := range r.origin.Arrivals() {
		if a.Path != "/robots.txt" {
			out = append(out, a.Host+a.Path)
		}
	}
	return out
}

func TestProductToken(t *testing.T) {
	for ua, want := range map[string]string{
		"downloader/1.0 (+https://example.invalid/crawler)": "downloader",
		"My_Bot-2/3":                           "my_bot-",
		"Mozilla/5.0 (compatible; downloader)": "mozilla",
		"":                                     "downloader",
		"/1.0":                                 "downloader",
	} {
		if got := ProductToken(ua); got != want {
			t.Errorf("ProductToken(%q) = %q, want %q", ua, got, want)
		}
	}
}

// TestRules: the group of our product token decides (not the * group), disallowed paths are
// skipped and never requested, Crawl-delay raises the task's interval and reaches the
// queue, robots.txt is fetched once per site, and 2xx-empty or 4xx files allow all.
func TestRules(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC))
	r := newRig(t, clk)
	ctx := t.Context()
	cases := []struct {
		url  string
		skip downloader.SkipReason
	}{
		{"http://rules.test/", ""},
		{"http://rules.test/private", downloader.SkipRobotsDisallowed},
		{"http://rules.test/private/x?y=1", downloader.SkipRobotsDisallowed},
		{"http://rules.test/private/open/page", ""},
		{"http://star.test/", downloader.SkipRobotsDisallowed},
		{"http://star.test/a", downloader.SkipRobotsDisallowed},
		{"http://empty.test/a", ""},
		{"http://gone.test/a", ""},
		{"http://auth.test/a", ""},
		{"http://nofile.test/a", ""}, // 404 from the default handler
	}
	for i, c := range cases {
		out := r.runner.RunTask(ctx, task(string(rune('a'+i)), c.url, 0))
		if out.Report == nil {
			t.Fatalf("%s: %+v, want a report", c.url, out)
		}
		if out.Report.SkipReason != c.skip {
			t.Errorf("%s: skip_reason %q, want %q", c.url, out.Report.SkipReason, c.skip)
		}
		if c.skip != "" && (out.Report.FailReason != nil || out.Report.HTTPStatus != nil) {
			t.Errorf("%s: a skip carries a fail reason: %+v", c.url, out.Report.Summary)
		}
	}
	ran := r.next.ran()
	for _, c := range cases {
		if _, ok := ran[c.url]; ok != (c.skip == "") {
			t.Errorf("%s: ran %v, want %v", c.url, ok, c.skip == "")
		}
	}
	if got := *ran["http://rules.test/"].MinIntervalMs; got != 2000 {
		t.Errorf("rules.test task ran with min_interval_ms %d, want the Crawl-delay 2000", got)
	}
	if got := *ran["http://gone.test/a"].MinIntervalMs; got != 0 {
		t.Errorf("gone.test task ran with min_interval_ms %d, want its own 0", got)
	}
	if d, _ := r.delays.Load("rules.test"); d != 2*time.Second {
		t.Errorf("Crawl-delay told to the queue: %v, want 2s", d)
	}
	for host, n := range r.robotsRequests() {
		if n != 1 {
			t.Errorf("%s: robots.txt fetched %d times, want once", host, n)
		}
	}
	// The recorder stands for the engine: no page request reached the origin at all, and
	// in particular no disallowed one.
	if pages := r.pageRequests(); len(pages) != 0 {
		t.Errorf("pages requested by the robots gate itself: %v", pages)
	}
	// After 24 h the rules are read again.
	clk.Advance(CacheFor)
	r.runner.RunTask(ctx, task("z", "http://rules.test/again", 0))
	if n := r.robotsRequests()["rules.test"]; n != 2 {
		t.Errorf("after 24 h rules.test's robots.txt was fetched %d times in all, want 2", n)
	}
}

// TestUnreachable: a 5xx or a 429 disallows everything for now: the task goes back, and
// robots.txt is asked again after a backoff; after MaxAttemptCount such answers the tasks
// are skipped as robots_unavailable, with the answer that made it so.
func TestUnreachable(t *testing.T) {
	for _, host := range []string{"down.test", "busy.test"} {
		t.Run(host, func(t *testing.T) {
			clk := clocktest.NewFake(time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC))
			r := newRig(t, clk)
			ctx := t.Context()
			u := "http://" + host + "/page"
			for i, wait := range []time.Duration{5 * time.Second, 10 * time.Second} {
				out := r.runner.RunTask(ctx, task("t", u, 0))
				if !out.Release || out.RetryAfter != wait {
					t.Fatalf("answer %d: %+v, want a release for %v", i+1, out, wait)
				}
				// Within the backoff: handed back again, robots.txt not asked again.
				clk.Advance(wait - time.Second)
				if out := r.runner.RunTask(ctx, task("t", u, 0)); !out.Release || out.RetryAfter != time.Second {
					t.Fatalf("within the backoff: %+v", out)
				}
				if n := r.robotsRequests()[host]; n != i+1 {
					t.Fatalf("robots.txt asked %d times after %d answers", n, i+1)
				}
				clk.Advance(time.Second)
			}
			out := r.runner.RunTask(ctx, task("t", u, 0))
			if out.Report == nil || out.Report.SkipReason != downloader.SkipRobotsUnavailable {
				t.Fatalf("after three answers: %+v, want a skip as robots_unavailable", out)
			}
			if out.Report.HTTPStatus == nil || *out.Report.HTTPStatus != robotsFiles[host].status || !out.Report.HasReachedOrigin {
				t.Errorf("skip report %+v, want the robots.txt answer's status", out.Report.Summary)
			}
			if len(r.next.ran()) != 0 || len(r.pageRequests()) != 0 {
				t.Errorf("a task ran while robots.txt was unreachable")
			}
		})
	}
}

// TestRobotsRequestIsAdmitted: robots.txt is a request to the origin like any other, run
// by the engine: it takes the domain's slot in the limiter, so the request after it waits
// one interval, and the engine's observers see it as entry A's request for the task.
func TestRobotsRequestIsAdmitted(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC))
	r := newRig(t, clk)
	clk.Advance(time.Hour) // past the limiter's start-up window (SPEC §2: loss and rebuild)
	const interval = 300 * time.Millisecond
	out := r.runner.RunTask(t.Context(), task("a", "http://gone.test/x", interval.Milliseconds()))
	if out.Report == nil || r.robotsRequests()["gone.test"] != 1 {
		t.Fatalf("%+v, arrivals %v", out, r.origin.Arrivals())
	}
	// The engine's own request for the task (the recorder stands for it) would now find
	// the slot taken by robots.txt.
	adm, delay, ok := r.lim.Reserve(clk.Now(), "gone.test", interval, downloader.IntervalSourceLease, downloader.EntryLease, time.Time{})
	if !ok {
		t.Fatal("no reservation")
	}
	adm.Cancel()
	if delay != interval {
		t.Fatalf("the request after robots.txt would wait %v, want the interval %v: robots.txt did not take the slot", delay, interval)
	}
	if len(r.pageRequests()) != 0 {
		t.Fatalf("arrivals %v", r.origin.Arrivals())
	}
	evs := r.events.list()
	if len(evs) != 1 {
		t.Fatalf("observed %+v, want the robots.txt request", evs)
	}
	if ev := evs[0]; ev.URL != "http://gone.test/robots.txt" || ev.Entry != downloader.EntryLease || ev.TaskID != "a" ||
		ev.Summary.HTTPStatus == nil || *ev.Summary.HTTPStatus != 404 || !ev.Summary.HasReachedOrigin {
		t.Errorf("observed %+v, want entry A's robots.txt request for task a, answered 404", ev)
	}
}

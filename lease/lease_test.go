package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/lease"
	"downloader/localqueue"
	"downloader/origintest"
	"downloader/server"
	"downloader/store/embedded/embeddedtest"
)

// TestDelayedTasksRunAtTheirSlot: several tasks of one domain leased at once run one
// interval apart, each at its reserved slot: the origin sees gaps of at least the interval
// and not much more; other domains are not held up meanwhile.
func TestDelayedTasksRunAtTheirSlot(t *testing.T) {
	const interval = 400 * time.Millisecond
	r := newRig(t, rigOptions{})
	s := newFakeScheduler(t, r.changes)
	for i := range 4 {
		s.add(task(fmt.Sprintf("slow-%d", i), hostURL("slow.test", i), interval.Milliseconds()))
		s.add(task(fmt.Sprintf("fast-%d", i), hostURL(fmt.Sprintf("fast%d.test", i), 0), interval.Milliseconds()))
	}
	r.run(t, s.client(t), lease.Config{})
	waitFor(t, r.changes, "8 reports", func() bool { return len(s.reportedIDs()) == 8 })

	gaps := gapsOf(r.origin, "slow.test")
	if len(gaps) != 3 {
		t.Fatalf("slow.test gaps = %v, want 3", gaps)
	}
	for _, g := range gaps {
		if g < interval-originLatencyAllowance {
			t.Errorf("slow.test gap %v, below the interval %v", g, interval)
		}
	}
	// At their slot: the typical gap is the interval, not more (a task dropped and leased
	// again, or run at the slot after its own, would come an interval or more late). The
	// median, and half an interval of slack, so that scheduling stalls of a loaded machine
	// (other test binaries run beside this one) do not fail the test.
	sorted := slices.Clone(gaps)
	slices.Sort(sorted)
	if med := sorted[len(sorted)/2]; med > interval+interval/2 {
		t.Errorf("slow.test gaps %v: median %v, want about %v", gaps, med, interval)
	}
	if s.reLeasedCount() != 0 {
		t.Errorf("%d leases handed out again", s.reLeasedCount())
	}
	if v := r.origin.Violations(func(string) (time.Duration, bool) { return interval, true }, originLatencyAllowance); len(v) > 0 {
		t.Errorf("violations: %v", v)
	}
	for _, rep := range s.reports {
		if rep.FailReason != nil || rep.HTTPStatus == nil || *rep.HTTPStatus != 200 || rep.PageKey == "" {
			t.Errorf("report %+v, want a 200 with a page key", rep)
		}
	}
	_, rels, _ := s.snapshot()
	if len(rels) != 0 {
		t.Errorf("releases %v, want none", rels)
	}
}

// TestWaitPastLeaseIsReleased: a task whose domain's next slot would come after its lease
// (minus the request timeout) is handed back at once, with the wait as retry_after_seconds,
// and never fetched.
// With the batched form, the release goes out in a batched call.
func TestWaitPastLeaseIsReleased(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) { testWaitPastLeaseIsReleased(t, batched) })
	}
}

func testWaitPastLeaseIsReleased(t *testing.T, batched bool) {
	clk := clocktest.NewFake(time.Now())
	r := newRig(t, rigOptions{clock: clk, timeout: 5 * time.Second})
	clk.Advance(2 * time.Minute) // past the limiter's rebuild window
	s := newFakeScheduler(t, r.changes)
	s.isBatched = batched
	expires := clk.Now().Add(40 * time.Second)
	first := task("first", "http://busy.test/1", 60_000)
	second := task("second", "http://busy.test/2", 60_000)
	first.LeaseExpiresAt, second.LeaseExpiresAt = expires, expires
	s.add(first, second)
	r.run(t, s.client(t), lease.Config{})
	waitFor(t, r.changes, "a report and a release", func() bool {
		reps, rels, _ := s.snapshot()
		return len(reps) == 1 && len(rels) == 1
	})
	// Both are leased at once and run side by side: whichever reserves first runs.
	reps, rels, _ := s.snapshot()
	if reps[0].FailReason != nil {
		t.Errorf("report = %+v", reps[0])
	}
	if rels[0].TaskID == reps[0].TaskID || rels[0].RetryAfterSeconds != 60 {
		t.Errorf("release = %+v, want the other task after 60 s", rels[0])
	}
	if n := len(r.origin.Arrivals()); n != 1 {
		t.Errorf("origin saw %d requests, want 1", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if want := map[bool]int{false: 0, true: 1}[batched]; s.batchReleaseCalls != want || s.batchReportCalls != want {
		t.Errorf("batched calls: %d releases, %d reports; want %d each", s.batchReleaseCalls, s.batchReportCalls, want)
	}
}

// TestReportsSurviveSchedulerOutage: while the scheduler refuses reports the tasks still
// run and their reports wait in the outbox, through a restart too; when it is back every
// report arrives, all with known task ids (duplicates only as at-least-once). With the
// batched form the outbox goes out in batched calls only.
func TestReportsSurviveSchedulerOutage(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) { testReportsSurviveSchedulerOutage(t, batched) })
	}
}

func testReportsSurviveSchedulerOutage(t *testing.T, batched bool) {
	r := newRig(t, rigOptions{})
	s := newFakeScheduler(t, r.changes)
	s.isBatched = batched
	s.setReportsDown(true)
	want := map[string]bool{}
	for i := range 6 {
		id := fmt.Sprintf("t%d", i)
		want[id] = true
		s.add(task(id, hostURL(fmt.Sprintf("h%d.test", i%3), i), 0))
	}
	stop := r.run(t, s.client(t), lease.Config{})
	waitFor(t, r.changes, "all tasks fetched and reports refused", func() bool {
		_, _, calls := s.snapshot()
		return len(r.origin.Arrivals()) == 6 && calls >= 6
	})
	waitFor(t, r.changes, "six reports in the outbox", func() bool {
		n, err := r.outbox.ReportCount(context.Background())
		return err == nil && n == 6
	})
	// Stop while the scheduler is still down: the reports stay in the outbox.
	stop()
	if n, _ := r.outbox.ReportCount(context.Background()); n != 6 {
		t.Fatalf("outbox holds %d reports after stop, want 6", n)
	}
	if err := r.store.Close(); err != nil {
		t.Fatal(err)
	}

	// A new process on the same data dir, with the scheduler back.
	r2 := newRig(t, rigOptions{dir: r.dir, origin: r.origin, changes: r.changes})
	s.setReportsDown(false)
	r2.run(t, s.client(t), lease.Config{})
	waitFor(t, r.changes, "every report delivered", func() bool { return len(s.reportedIDs()) == 6 })
	for id, n := range s.reportedIDs() {
		if !want[id] {
			t.Errorf("report for unknown task %q", id)
		}
		if n > 2 {
			t.Errorf("task %s reported %d times", id, n)
		}
	}
	waitFor(t, r.changes, "empty outbox", func() bool {
		n, err := r2.outbox.ReportCount(context.Background())
		return err == nil && n == 0
	})
	if n := len(r.origin.Arrivals()); n != 6 {
		t.Errorf("origin saw %d requests, want 6 (nothing fetched again)", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if batched && (s.batchReportCalls == 0 || s.batchMaxSize < 2 || s.batchMaxSize > lease.DefaultMaxBatchCount) {
		t.Errorf("batched: %d calls, largest %d reports; want calls of 2..%d", s.batchReportCalls, s.batchMaxSize, lease.DefaultMaxBatchCount)
	}
	if !batched && s.batchReportCalls != 0 {
		t.Errorf("single form: %d batched calls", s.batchReportCalls)
	}
}

// TestMalformedTasksAreReported: bad tasks are reported as invalid_task, never fetched,
// never retried, and the loop goes on with the good ones.
func TestMalformedTasksAreReported(t *testing.T) {
	r := newRig(t, rigOptions{})
	s := newFakeScheduler(t, r.changes)
	s.addRaw(
		`{"task_id":"bad-url","url":"not a url","domain":"","min_interval_ms":0}`,
		`{"task_id":"no-interval","url":"http://a.test/","should_render":false}`,
		`{"task_id":"other-host","url":"http://a.test/","domain":"evil.test","min_interval_ms":0}`,
		`{"task_id":"wrong-type","url":"http://a.test/","min_interval_ms":"soon"}`,
		`{"url":"http://a.test/no-id","min_interval_ms":0}`,
		`"just a string"`,
	)
	s.add(task("good", "http://good.test/", 0))
	r.run(t, s.client(t), lease.Config{})
	waitFor(t, r.changes, "five reports", func() bool { return len(s.reportedIDs()) == 5 })
	reps, rels, _ := s.snapshot()
	for _, rep := range reps {
		if rep.TaskID == "good" {
			if rep.FailReason != nil {
				t.Errorf("good task: %+v", rep)
			}
			continue
		}
		if rep.FailReason == nil || *rep.FailReason != downloader.FailInvalidTask || rep.HasReachedOrigin || rep.HTTPStatus != nil {
			t.Errorf("report %s = %+v, want invalid_task, not reached", rep.TaskID, rep)
		}
	}
	if len(rels) != 0 {
		t.Errorf("releases %v", rels)
	}
	if got := r.origin.CountByHost(); len(got) != 1 || got["good.test"] != 1 {
		t.Errorf("origin saw %v, want only good.test once", got)
	}
	// Reported once each: not retried.
	for id, n := range s.reportedIDs() {
		if n != 1 {
			t.Errorf("%s reported %d times", id, n)
		}
	}
}

// TestShutdownLetsInFlightFinishAndReleasesTheRest: on stop the task in flight finishes
// within the grace period and is reported; the tasks waiting for a later slot are
// released; nothing is lost.
func TestShutdownLetsInFlightFinishAndReleasesTheRest(t *testing.T) {
	entered := make(chan struct{}, 8)
	proceed := make(chan struct{})
	r := newRig(t, rigOptions{handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Host == "slowpage.test" {
			entered <- struct{}{}
			<-proceed
		}
		origintest.Page(w, req)
	})})
	s := newFakeScheduler(t, r.changes)
	s.add(task("inflight", "http://slowpage.test/", 0))
	for i := range 3 {
		s.add(task(fmt.Sprintf("wait-%d", i), hostURL("later.test", i), 30_000))
	}
	stop := r.run(t, s.client(t), lease.Config{})
	<-entered
	// later.test's tasks wait for slots 30 s apart (the first for the limiter's rebuild
	// window), far past the grace period. The in-flight request is let go once the stop
	// has begun; once it is reported the grace period is over and the runner's owner stops
	// the engine, as cmd/downloader does.
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	close(proceed)
	waitFor(t, r.changes, "the in-flight task's report, acknowledged", func() bool {
		reps, _, _ := s.snapshot()
		pending, err := r.outbox.PendingReports(t.Context(), "", 1)
		return len(reps) == 1 && err == nil && len(pending) == 0
	})
	r.eng.Stop()
	<-stopped
	reps, rels, _ := s.snapshot()
	if len(reps) != 1 || reps[0].TaskID != "inflight" || reps[0].FailReason != nil {
		t.Errorf("reports = %+v, want inflight done", reps)
	}
	var released []string
	for _, rel := range rels {
		released = append(released, rel.TaskID)
	}
	slices.Sort(released)
	if !slices.Equal(released, []string{"wait-0", "wait-1", "wait-2"}) {
		t.Errorf("released %v, want the three waiting tasks", released)
	}
	if n := r.origin.CountByHost()["later.test"]; n != 0 {
		t.Errorf("later.test fetched %d times", n)
	}
}

// TestKillAndRestartMidCrawl: the local queue crawl is killed (the store goes away under
// it, as in a crash: nothing more is written, nothing released or flushed), then a new
// process on the same data dir finishes it. Every URL is fetched, and no URL twice except
// those whose leases were in flight at the kill. Both ways a task's end can be committed
// with the local queue: by the queue itself (Config.Committer, the crawl's wiring), and
// through the outbox (the crawl with discovery).
func TestKillAndRestartMidCrawl(t *testing.T) {
	for _, isCommitter := range []bool{true, false} {
		t.Run(fmt.Sprintf("committer=%v", isCommitter), func(t *testing.T) { testKillAndRestartMidCrawl(t, isCommitter) })
	}
}

func testKillAndRestartMidCrawl(t *testing.T, isCommitter bool) {
	const maxHeld = 8
	r := newRig(t, rigOptions{})
	q, err := localqueue.Open(t.Context(), r.store, localqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var tasks []downloader.Task
	for i := range 60 {
		iv := int64(20)
		tasks = append(tasks, downloader.Task{URL: hostURL(fmt.Sprintf("k%d.test", i%6), i), MinIntervalMs: &iv, ShouldStore: true})
	}
	if _, err := q.Submit(t.Context(), tasks); err != nil {
		t.Fatal(err)
	}
	held := func() int { return maxHeld }
	cfg := lease.Config{MaxHeldCount: held, FlushTimeout: time.Millisecond}
	if isCommitter {
		cfg.Committer = q
	}
	stop := r.run(t, q, cfg)
	waitFor(t, r.changes, "20 tasks done", func() bool { return q.Counts().DoneCount >= 20 })
	// The kill: the store closes under the running loop.
	if err := r.store.Close(); err != nil {
		t.Fatal(err)
	}
	r.eng.Stop()
	stop()
	fetchedBefore := len(r.origin.Arrivals())

	r2 := newRig(t, rigOptions{dir: r.dir, origin: r.origin, changes: r.changes})
	q2, err := localqueue.Open(t.Context(), r2.store, localqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	before := q2.Counts()
	cfg2 := lease.Config{MaxHeldCount: held}
	if isCommitter {
		cfg2.Committer = q2
	}
	r2.run(t, q2, cfg2)
	waitFor(t, r.changes, "the crawl to finish", func() bool {
		c := q2.Counts()
		return c.PendingCount == 0 && c.LeasedCount == 0
	})
	c := q2.Counts()
	if c.DoneCount != 60 || c.SucceededCount != 60 {
		t.Errorf("counts = %+v, want 60 done", c)
	}
	perURL := map[string]int{}
	for _, a := range r.origin.Arrivals() {
		perURL[a.Host+a.Path]++
	}
	twice := 0
	for u, k := range perURL {
		if k > 2 {
			t.Errorf("%s fetched %d times", u, k)
		}
		if k == 2 {
			twice++
		}
	}
	if len(perURL) != 60 {
		t.Errorf("%d URLs fetched, want 60", len(perURL))
	}
	if twice > maxHeld {
		t.Errorf("%d URLs fetched twice, more than the %d leases that can be in flight", twice, maxHeld)
	}
	// Every acknowledged task's page and fetch_result survived the kill: they are committed
	// with its report in one write (localqueue.Queue.CommitTask).
	pages := 0
	err = q2.RangeDone(t.Context(), func(task *downloader.Task, rep *downloader.Report) bool {
		if rep.PageKey == "" {
			t.Errorf("%s: done without a page key", task.URL)
			return true
		}
		if _, err := r2.store.Page(t.Context(), rep.PageKey); err != nil {
			t.Errorf("%s: page %s: %v", task.URL, rep.PageKey, err)
		}
		pages++
		return true
	})
	if err != nil || pages != 60 {
		t.Errorf("RangeDone: %d pages checked, %v", pages, err)
	}
	for i := range 6 {
		d := fmt.Sprintf("k%d.test", i)
		rs, _, err := r2.store.FetchResults(t.Context(), d, 100, "")
		if err != nil || len(rs) < 10 {
			t.Errorf("fetch results of %s: %d, %v; want at least its 10 tasks'", d, len(rs), err)
		}
	}
	t.Logf("before the kill: %d fetched, %d done; after: %d fetched twice", fetchedBefore, before.DoneCount, twice)
}

// TestEntriesTogetherNoViolations: entry A (lease loop), B (POST /v1/render) and C
// (POST /v1/probe) hit the same domains at once, round after round: the origin still sees
// no two requests to a domain closer than its interval.
func TestEntriesTogetherNoViolations(t *testing.T) {
	const (
		interval = 300 * time.Millisecond
		rounds   = 5
	)
	r := newRig(t, rigOptions{})
	s := newFakeScheduler(t, r.changes)
	hosts := []string{"x0.test", "x1.test", "x2.test"}
	api := httptest.NewServer(server.New(server.Config{Probe: r.eng, Render: r.eng, Settings: r.eng, Domains: r.lim, Slots: r.gate}))
	t.Cleanup(api.Close)
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)

	var okB, okC, refusedB, refusedC atomic.Int64
	call := func(path, body string) {
		resp, err := client.Post(api.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		switch {
		case path == "/v1/render" && resp.StatusCode == 200:
			okB.Add(1)
		case path == "/v1/render" && resp.StatusCode == 429:
			refusedB.Add(1)
		case path == "/v1/probe" && m["fail_reason"] == nil:
			okC.Add(1)
		case path == "/v1/probe" && m["fail_reason"] == "self_rate_limited":
			refusedC.Add(1)
		default:
			t.Errorf("%s: %d %v", path, resp.StatusCode, m)
		}
	}
	r.run(t, s.client(t), lease.Config{})
	// Each round the scheduler gets one task per host while B and C callers ask for the
	// same hosts at the same moment; whoever is first gets the slot, the others are delayed
	// (A) or refused (B, C).
	var wg sync.WaitGroup
	for round := range rounds {
		// Start the round once every host may be asked again, so that B and C have a
		// chance against A.
		r.waitQuiet(t, interval)
		for i, host := range hosts {
			s.add(task(fmt.Sprintf("a%d-%d", round, i), fmt.Sprintf("http://%s/a%d", host, round), interval.Milliseconds()))
			wg.Add(2)
			go func() {
				defer wg.Done()
				call("/v1/render", fmt.Sprintf(`{"url":"http://%s/b%d","should_render":false,"min_interval_ms":%d}`, host, round, interval.Milliseconds()))
			}()
			go func() {
				defer wg.Done()
				call("/v1/probe", fmt.Sprintf(`{"url":"http://%s/c%d","min_interval_ms":%d}`, host, round, interval.Milliseconds()))
			}()
		}
		want := len(hosts) * (round + 1)
		waitFor(t, r.changes, fmt.Sprintf("%d reports", want), func() bool { return len(s.reportedIDs()) == want })
	}
	wg.Wait()
	if v := r.origin.Violations(func(string) (time.Duration, bool) { return interval, true }, originLatencyAllowance); len(v) > 0 {
		t.Errorf("violations with A, B and C together: %v", v)
	}
	t.Logf("B: %d ok, %d refused; C: %d ok, %d refused; origin: %v; min gaps %v", okB.Load(), refusedB.Load(), okC.Load(), refusedC.Load(), r.origin.CountByHost(), r.origin.MinGaps())
	if okB.Load()+okC.Load() == 0 {
		t.Errorf("no B or C request got through: the test did not mix the entries")
	}
}

// TestTaskEndWithStoresOfTheirOwn: with page and result stores outside the database of
// the outbox and the committer (Config.Pages, Results: TiKV in cluster mode, another
// embedded store here), a task's page and fetch_result are written there, and only its
// report is committed by the committer, with the page's key.
func TestTaskEndWithStoresOfTheirOwn(t *testing.T) {
	r := newRig(t, rigOptions{})
	other := embeddedtest.Open(t, t.TempDir())
	q, err := localqueue.Open(t.Context(), r.store, localqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var tasks []downloader.Task
	for i := range 4 {
		iv := int64(0)
		tasks = append(tasks, downloader.Task{URL: hostURL(fmt.Sprintf("o%d.test", i), i), MinIntervalMs: &iv, ShouldStore: true})
	}
	if _, err := q.Submit(t.Context(), tasks); err != nil {
		t.Fatal(err)
	}
	stop := r.run(t, q, lease.Config{Committer: q, Pages: other, Results: other})
	waitFor(t, r.changes, "4 tasks done", func() bool { return q.Counts().DoneCount == 4 })
	stop()
	pages := 0
	err = q.RangeDone(t.Context(), func(task *downloader.Task, rep *downloader.Report) bool {
		if _, err := other.Page(t.Context(), rep.PageKey); err != nil {
			t.Errorf("%s: page %q in the page store: %v", task.URL, rep.PageKey, err)
		}
		if _, err := r.store.Page(t.Context(), rep.PageKey); downloader.ErrorCode(err) != downloader.ENOTFOUND {
			t.Errorf("%s: page %q in the committer's store: %v, want ENOTFOUND", task.URL, rep.PageKey, err)
		}
		pages++
		return true
	})
	if err != nil || pages != 4 {
		t.Errorf("RangeDone: %d pages checked, %v", pages, err)
	}
	if rs, _, err := other.FetchResults(t.Context(), "", 10, ""); err != nil || len(rs) != 4 {
		t.Errorf("fetch results in the result store: %d, %v; want 4", len(rs), err)
	}
	if rs, _, err := r.store.FetchResults(t.Context(), "", 10, ""); err != nil || len(rs) != 0 {
		t.Errorf("fetch results in the committer's store: %d, %v; want none", len(rs), err)
	}
}

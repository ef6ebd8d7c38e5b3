package lease_test

import (
	"context"
	"downloader/internal/testkit"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"downloader"
	"downloader/clock"
	"downloader/engine"
	"downloader/fetch"
	"downloader/lease"
	"downloader/limiter"
	"downloader/localqueue"
	"downloader/netguard"
	"downloader/origintest"
	"downloader/outbox"
	"downloader/scheduler"
	"downloader/store/embedded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Interface checks: both sources satisfy lease.Source, the engine is a Runner and the
// embedded outbox an Outbox.
var (
	_ lease.Source             = (*scheduler.Client)(nil)
	_ lease.Source             = (*localqueue.Queue)(nil)
	_ downloader.TaskCommitter = (*localqueue.Queue)(nil)
	_ lease.Runner             = (*engine.Engine)(nil)
	_ lease.Outbox             = (*outbox.Outbox)(nil)
)

// originLatencyAllowance is how much earlier than the interval the origin may see a
// request in these tests. The limiter spaces the moments requests go on the wire by at
// least the interval (its own tests prove that on a fake clock); the origin records a
// request when its handler runs, and on this 2-core machine under -race, with other test
// binaries running, the handler was measured to run up to ~20 ms after the client wrote
// the request, and once ~90 ms. A request delayed that way and the next one on time look
// closer than they were sent. The intervals in these tests are large next to this
// allowance, so a task run early (at once instead of at its slot) still fails them.
const originLatencyAllowance = 100 * time.Millisecond

// waitTimeout bounds every wait on a condition, so that a broken test fails instead of
// hanging. It is not a sleep: waits return as soon as the condition holds.
const waitTimeout = 30 * time.Second

// notifier lets a test wait for a condition on state that changes elsewhere. The rig's
// notifier is told of every change a test waits on: a request at the origin, a report or a
// release at the scheduler, a write to the outbox, a call into the local queue. So a wait
// re-checks its condition when something happened, never on a tick: these tests run real
// servers on loopback, where a synctest bubble cannot tell when everything is blocked.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
	}
	n.ch = make(chan struct{})
}

// waitFor returns when cond holds, re-checking it whenever n changes. cond must read only
// state whose changes n is told of.
func waitFor(t *testing.T, n *notifier, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		ch := n.changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitQuiet returns once no request has reached the origin for d. The limiter runs on the
// real clock in these tests, so the end of an interval is an instant on it: this waits on a
// timer set to that instant (moved on if a request arrives meanwhile), not on a poll.
func (r *rig) waitQuiet(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		ch := r.changes.changed()
		var last time.Time
		for _, a := range r.origin.Arrivals() {
			if a.At.After(last) {
				last = a.At
			}
		}
		wait := time.Until(last.Add(d))
		if wait <= 0 {
			return
		}
		quiet := time.NewTimer(wait)
		select {
		case <-quiet.C:
		case <-ch:
		case <-deadline.C:
			quiet.Stop()
			t.Fatalf("no quiet %v at the origin within %v", d, waitTimeout)
		}
		quiet.Stop()
	}
}

// notifyingOutbox is the rig's outbox as the loop sees it: every write tells the notifier,
// once it is done.
type notifyingOutbox struct {
	o *outbox.Outbox
	n *notifier
}

var (
	_ lease.BatchOutbox = notifyingOutbox{}
)

func (w notifyingOutbox) CommitTask(ctx context.Context, end *downloader.TaskEnd) error {
	defer w.n.notify()
	return w.o.CommitTask(ctx, end)
}

func (w notifyingOutbox) PendingReports(ctx context.Context, after string, limit int) ([]downloader.Report, error) {
	return w.o.PendingReports(ctx, after, limit)
}

func (w notifyingOutbox) DeleteReport(ctx context.Context, r *downloader.Report) (bool, error) {
	defer w.n.notify()
	return w.o.DeleteReport(ctx, r)
}

func (w notifyingOutbox) DeleteReports(ctx context.Context, rs []downloader.Report) error {
	defer w.n.notify()
	return w.o.DeleteReports(ctx, rs)
}

// notifyingCommitter is a source's commit of a task's end (the local queue's) that tells
// the notifier once it is done.
type notifyingCommitter struct {
	c downloader.TaskCommitter
	n *notifier
}

func (w notifyingCommitter) CommitTask(ctx context.Context, end *downloader.TaskEnd) error {
	defer w.n.notify()
	return w.c.CommitTask(ctx, end)
}

// notifyingSource is a single-form source (the local queue) that tells the notifier after
// every call.
type notifyingSource struct {
	src lease.Source
	n   *notifier
}

func (w notifyingSource) Lease(ctx context.Context, workerID string, maxTaskCount int) ([]downloader.Task, error) {
	defer w.n.notify()
	return w.src.Lease(ctx, workerID, maxTaskCount)
}

func (w notifyingSource) Report(ctx context.Context, r *downloader.Report) error {
	defer w.n.notify()
	return w.src.Report(ctx, r)
}

func (w notifyingSource) Release(ctx context.Context, taskID string, retryAfter time.Duration) error {
	defer w.n.notify()
	return w.src.Release(ctx, taskID, retryAfter)
}

// fakeScheduler is a real HTTP server speaking docs/scheduler-contract.md from an in-memory
// list of tasks, recording every report and release.
type fakeScheduler struct {
	t       *testing.T
	srv     *httptest.Server
	changes *notifier // told of every report and release

	mu          sync.Mutex
	pending     []json.RawMessage
	leaseFor    time.Duration
	leaseCalls  int
	handedOut   map[string]int // task id → times leased
	reports     []downloader.Report
	reportCalls int
	releases    []releaseCall
	reportsDown bool // answer 503 to reports
	// isBatched makes it speak the batched form too (POST /v1/reports, /v1/releases);
	// otherwise those answer 404, as a scheduler with the single form only would.
	isBatched                      bool
	batchReportCalls, batchMaxSize int
	batchReleaseCalls              int
}

type releaseCall struct {
	TaskID            string `json:"task_id"`
	RetryAfterSeconds int64  `json:"retry_after_seconds"`
}

func newFakeScheduler(t *testing.T, changes *notifier) *fakeScheduler {
	f := &fakeScheduler{t: t, leaseFor: time.Minute, changes: changes}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/lease", f.lease)
	mux.HandleFunc("POST /v1/report", f.report)
	mux.HandleFunc("POST /v1/release", f.release)
	mux.HandleFunc("POST /v1/reports", f.reportBatch)
	mux.HandleFunc("POST /v1/releases", f.releaseBatch)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// add queues tasks; a task without lease_expires_at gets one leaseFor after it is leased.
func (f *fakeScheduler) add(tasks ...downloader.Task) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tk := range tasks {
		b, err := json.Marshal(tk)
		if err != nil {
			f.t.Fatal(err)
		}
		f.pending = append(f.pending, b)
	}
}

// addRaw queues tasks as raw JSON objects, as a buggy scheduler might send them.
func (f *fakeScheduler) addRaw(objs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range objs {
		f.pending = append(f.pending, json.RawMessage(o))
	}
}

func (f *fakeScheduler) lease(w http.ResponseWriter, r *http.Request) {
	var req struct {
		WorkerID     string `json:"worker_id"`
		MaxTaskCount int    `json:"max_task_count"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.WorkerID == "" || req.MaxTaskCount < 1 {
		f.t.Errorf("bad lease request: %+v, %v", req, err)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	n := min(req.MaxTaskCount, len(f.pending))
	out := make([]json.RawMessage, 0, n)
	for _, raw := range f.pending[:n] {
		var m map[string]any
		if json.Unmarshal(raw, &m) == nil {
			if v, ok := m["lease_expires_at"].(string); ok && v == "0001-01-01T00:00:00Z" {
				m["lease_expires_at"] = time.Now().Add(f.leaseFor).UTC().Format(time.RFC3339Nano)
				raw, _ = json.Marshal(m)
			}
		}
		out = append(out, raw)
		var id struct {
			TaskID string `json:"task_id"`
		}
		if json.Unmarshal(raw, &id) == nil {
			if f.handedOut == nil {
				f.handedOut = map[string]int{}
			}
			f.handedOut[id.TaskID]++
		}
	}
	f.pending = f.pending[n:]
	f.leaseCalls++
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"tasks": out})
}

func (f *fakeScheduler) report(w http.ResponseWriter, r *http.Request) {
	var rep downloader.Report
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		f.t.Errorf("bad report: %v", err)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.reportCalls++
	down := f.reportsDown
	if !down {
		f.reports = append(f.reports, rep)
	}
	f.mu.Unlock()
	f.changes.notify()
	if down {
		http.Error(w, "scheduler is down", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type itemResult struct {
	TaskID     string `json:"task_id"`
	HTTPStatus int    `json:"http_status"`
}

func (f *fakeScheduler) batched() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.isBatched
}

func (f *fakeScheduler) reportBatch(w http.ResponseWriter, r *http.Request) {
	if !f.batched() {
		http.NotFound(w, r)
		return
	}
	var body struct {
		Reports []downloader.Report `json:"reports"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || len(body.Reports) == 0 {
		f.t.Errorf("bad report batch: %v", err)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.batchReportCalls++
	f.reportCalls += len(body.Reports)
	f.batchMaxSize = max(f.batchMaxSize, len(body.Reports))
	down := f.reportsDown
	var results []itemResult
	if !down {
		f.reports = append(f.reports, body.Reports...)
		for _, rep := range body.Reports {
			results = append(results, itemResult{TaskID: rep.TaskID, HTTPStatus: http.StatusOK})
		}
	}
	f.mu.Unlock()
	f.changes.notify()
	if down {
		http.Error(w, "scheduler is down", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"results": results})
}

func (f *fakeScheduler) releaseBatch(w http.ResponseWriter, r *http.Request) {
	if !f.batched() {
		http.NotFound(w, r)
		return
	}
	var body struct {
		Releases []releaseCall `json:"releases"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || len(body.Releases) == 0 {
		f.t.Errorf("bad release batch: %v", err)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.batchReleaseCalls++
	f.releases = append(f.releases, body.Releases...)
	var results []itemResult
	for _, rel := range body.Releases {
		results = append(results, itemResult{TaskID: rel.TaskID, HTTPStatus: http.StatusNoContent})
	}
	f.mu.Unlock()
	f.changes.notify()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"results": results})
}

func (f *fakeScheduler) release(w http.ResponseWriter, r *http.Request) {
	var rel releaseCall
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rel); err != nil {
		f.t.Errorf("bad release: %v", err)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.releases = append(f.releases, rel)
	f.mu.Unlock()
	f.changes.notify()
	w.WriteHeader(http.StatusNoContent)
}

// reLeasedCount returns how many tasks were handed out more than once (by task id).
func (f *fakeScheduler) reLeasedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.handedOut {
		if c > 1 {
			n++
		}
	}
	return n
}

func (f *fakeScheduler) setReportsDown(down bool) {
	f.mu.Lock()
	f.reportsDown = down
	f.mu.Unlock()
}

func (f *fakeScheduler) snapshot() (reports []downloader.Report, releases []releaseCall, reportCalls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]downloader.Report(nil), f.reports...), append([]releaseCall(nil), f.releases...), f.reportCalls
}

// reportedIDs returns how many reports each task id received.
func (f *fakeScheduler) reportedIDs() map[string]int {
	reps, _, _ := f.snapshot()
	m := map[string]int{}
	for _, r := range reps {
		m[r.TaskID]++
	}
	return m
}

func (f *fakeScheduler) client(t *testing.T) *scheduler.Client {
	c, err := scheduler.New(scheduler.Config{URL: f.srv.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// rig is the real entry A stack: an origin with many virtual hosts, the guarded fetcher,
// the limiter and global cap, the engine and the embedded store.
type rig struct {
	changes *notifier
	origin  *origintest.Origin
	clk     clock.Clock
	lim     *limiter.Limiter
	gate    *limiter.Gate
	eng     *engine.Engine
	fetch   *fetch.Fetcher
	dir     string
	store   *embedded.Store
	outbox  *outbox.Outbox
}

type rigOptions struct {
	handler http.Handler
	clock   clock.Clock // engine and limiter clock; default real
	timeout time.Duration
	dir     string // data dir to reuse (a restart)
	origin  *origintest.Origin
	changes *notifier // the notifier to share (a restart); default a new one
}

// loopbackDialer refuses (and fails the test on) any address outside 127.0.0.0/8 and ::1.
type loopbackDialer struct{ t *testing.T }

func (d loopbackDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		d.t.Errorf("test dialer asked for non-loopback address %s", address)
		return nil, errors.New("test dialer: non-loopback address refused")
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	changes := o.changes
	if changes == nil {
		changes = &notifier{}
	}
	origin := o.origin
	if origin == nil {
		h := o.handler
		if h == nil {
			h = http.HandlerFunc(origintest.Page)
		}
		// The origin records a request before it calls h: tell the notifier then.
		origin = origintest.New(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			changes.notify()
			h.ServeHTTP(w, req)
		}))
		t.Cleanup(origin.Close)
	}
	rule, err := netguard.ParseConnectTo(origin.ConnectTo())
	if err != nil {
		t.Fatal(err)
	}
	clk := o.clock
	if clk == nil {
		clk = clock.Real{}
	}
	if o.timeout == 0 {
		o.timeout = 5 * time.Second
	}
	dir := o.dir
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "store")
	}
	st, err := embedded.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	guard := netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}, Dialer: loopbackDialer{t}, Resolver: testkit.NoResolver{T: t}})
	lim := limiter.New(clk)
	gate := limiter.NewGate(16, 16)
	f := fetch.New(fetch.Config{Clock: clk, Guard: guard}) // the engine passes each request's hop admitter
	t.Cleanup(f.Close)
	eng := engine.New(engine.Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: f, Results: st, Pages: st,
		DefaultMinInterval: time.Second, DefaultTimeout: o.timeout})
	return &rig{changes: changes, origin: origin, clk: clk, lim: lim, gate: gate, eng: eng, fetch: f, dir: dir, store: st, outbox: outbox.New(st)}
}

// run starts a loop on src and returns a function that stops it and waits for Run to
// return.
func (r *rig) run(t *testing.T, src lease.Source, cfg lease.Config) (stop func()) {
	t.Helper()
	if _, ok := src.(lease.BatchSource); !ok {
		src = notifyingSource{src, r.changes}
	}
	cfg.Source, cfg.Runner, cfg.Outbox = src, r.eng, notifyingOutbox{r.outbox, r.changes}
	if cfg.Committer != nil {
		cfg.Committer = notifyingCommitter{cfg.Committer, r.changes}
	}
	if cfg.PollMax == 0 {
		cfg.PollMax = 20 * time.Millisecond
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMin, cfg.RetryMax = 5*time.Millisecond, 40*time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := lease.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func task(id, rawURL string, intervalMs int64) downloader.Task {
	return downloader.Task{TaskID: id, URL: rawURL, MinIntervalMs: &intervalMs, ShouldStore: true}
}

// gapsOf returns the start-to-start gaps the origin saw for host, in order.
func gapsOf(o *origintest.Origin, host string) []time.Duration {
	// In the order of their stamps: the origin lists arrivals as its handlers record them,
	// and on a loaded machine a request's handler can run after a later request's (a gap
	// of -524 ms, at load 20, where origintest's Violations, which sorts, found none).
	var at []time.Time
	for _, a := range o.Arrivals() {
		if a.Host == host {
			at = append(at, a.At)
		}
	}
	slices.SortFunc(at, time.Time.Compare)
	var out []time.Duration
	for i := 1; i < len(at); i++ {
		out = append(out, at[i].Sub(at[i-1]))
	}
	return out
}

func hostURL(host string, i int) string { return fmt.Sprintf("http://%s/p%d", host, i) }

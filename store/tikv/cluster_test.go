package tikv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/engine"
	"downloader/fetch"
	"downloader/internal/testkit"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/origintest"
	"downloader/server"
	"downloader/store/tikv/tikvtest"
)

// The cluster test's timing. Heartbeats are fast so that the test runs in seconds; the
// rules are the production ones.
const (
	clusterHeartbeat   = 100 * time.Millisecond
	clusterTTL         = 2 * time.Second // the lease: 20 heartbeats, so that a loaded machine does not fence an instance
	clusterSkew        = 20 * time.Millisecond
	clusterTimeout     = time.Second // request timeout of every instance
	clusterSlack       = 300 * time.Millisecond
	clusterWait        = 20 * time.Second // bound of every condition wait: a broken test fails, never hangs
	clusterTolerance   = 2 * time.Millisecond
	heldTimeout        = 4 * time.Second // node 2's held requests
	clusterDefaultIval = 300 * time.Millisecond
)

// node is one downloader instance wired as cmd/downloader wires it in cluster mode: its own
// limiter, gate, fetcher and engine, the shared Runtime and Store on the one mock cluster,
// and the HTTP server of entries B and C on 127.0.0.1.
type node struct {
	id     string
	client *tikvtest.Client
	store  *Store
	rt     *Runtime
	gate   *limiter.Gate
	eng    *engine.Engine
	fetch  *fetch.Fetcher
	http   *httptest.Server
	stop   context.CancelFunc
	joined chan struct{} // Start returned nil: the node is registered and has its share
	done   chan struct{} // Start failed, or Run returned
	wires  *wireLog      // every wire moment its limiter told
}

// wireLog records the wire moments a node's limiter told (Limiter.ObserveWire), for the
// report of a violation: the limiter's view beside the origin's.
type wireLog struct {
	mu  sync.Mutex
	all []wireMoment
}

type wireMoment struct {
	domain string
	at     time.Time
}

func (w *wireLog) observe(domain string, _ time.Duration, at time.Time) {
	w.mu.Lock()
	w.all = append(w.all, wireMoment{domain, at})
	w.mu.Unlock()
}

// of returns the wire moments told for domain.
func (w *wireLog) of(domain string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Time
	for _, m := range w.all {
		if m.domain == domain {
			out = append(out, m.at)
		}
	}
	return out
}

func startNode(t *testing.T, c *tikvtest.Cluster, id string, guard *netguard.Guard, capacity int) *node {
	t.Helper()
	return startNodeOn(t, c, id, guard, capacity, clock.Real{})
}

// startNodeOn is startNode with the node's clock (a skewed one).
func startNodeOn(t *testing.T, c *tikvtest.Cluster, id string, guard *netguard.Guard, capacity int, clk clock.Clock) *node {
	t.Helper()
	return startNodeWith(t, c, id, guard, capacity, clk, clk, nil)
}

// startPacedNode is startNode on the paced clock p, for PD too; the node's heartbeats pace
// p until the test ends or releases them (pacedClock).
func startPacedNode(t *testing.T, c *tikvtest.Cluster, id string, guard *netguard.Guard, capacity int, p *pacedClock) (*node, *pacedRuntime) {
	t.Helper()
	rc := p.runtime(id, clusterHeartbeat, clusterTTL)
	n := startNodeWith(t, c, id, guard, capacity, p, rc, p.refNow)
	rc.setRuntime(n.rt)
	t.Cleanup(rc.release) // before the node closes (cleanups run last first)
	return n, rc
}

// startNodeWith is startNode with the clock of the engine, the server and the fetcher
// (clk), the runtime's (rtClk) and PD's as the runtime reads it (ref; nil: PD's TSO).
func startNodeWith(t *testing.T, c *tikvtest.Cluster, id string, guard *netguard.Guard, capacity int,
	clk, rtClk clock.Clock, ref func(context.Context) (time.Time, error)) *node {
	t.Helper()
	cl := c.NewClient(t)
	st, err := New(cl.KV, Options{OpTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	lim := limiter.New(clk)
	wires := &wireLog{}
	lim.ObserveWire(wires.observe)
	gate := limiter.NewGate(capacity, 16)
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", id)
	rt, err := NewRuntime(st, RuntimeConfig{Share: engine.EvenShare, InstanceID: id, Clock: rtClk, Logger: logger, Gate: gate, MaxConcurrentCount: capacity,
		HeartbeatInterval: clusterHeartbeat, InstanceTTL: clusterTTL, MaxClockSkew: clusterSkew,
		AdmitTimeout: 3 * time.Second, DefaultTimeout: clusterTimeout, ExpirySlack: clusterSlack, TSOLag: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if ref != nil {
		rt.refNow = ref
	}
	f := fetch.New(fetch.Config{Clock: clk, Guard: guard}) // the engine passes each request's hop admitter
	eng := engine.New(engine.Config{Clock: clk, Logger: logger, Limiter: lim, Gate: gate, Fetcher: f, Results: st, Pages: st,
		Settings: st, Shared: rt, DefaultMinInterval: clusterDefaultIval, DefaultTimeout: clusterTimeout})
	srv := server.New(server.Config{Probe: eng, Render: eng, Settings: eng, Domains: lim, Slots: gate, Cluster: rt, Guard: guard, Clock: clk, Results: st, Pages: st})
	srv.SetReady(true)
	n := &node{id: id, client: cl, store: st, rt: rt, gate: gate, eng: eng, fetch: f, http: httptest.NewServer(srv), wires: wires,
		joined: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	n.stop = cancel
	if err := eng.LoadSettings(ctx); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(n.done)
		if err := rt.Start(ctx); err != nil {
			t.Errorf("%s: Start: %v", id, err)
			return
		}
		close(n.joined)
		_ = rt.Run(ctx)
	}()
	t.Cleanup(func() { n.close() })
	return n
}

// close stops the node: the engine, the runtime (which leaves the cluster if it can), the
// server and the fetcher. Calling it again does nothing.
func (n *node) close() {
	n.eng.Stop()
	n.stop()
	<-n.done
	n.http.Close()
	n.fetch.Close()
}

// waitJoined waits until n's Start returned, and fails the test unless it joined the
// cluster: a node whose Start failed serves with no share of the cap and no heartbeat.
func (n *node) waitJoined(t *testing.T) {
	t.Helper()
	limit := time.NewTimer(clusterWait)
	defer limit.Stop()
	select {
	case <-n.joined:
	case <-n.done:
		select {
		case <-n.joined: // it joined, then stopped
		default:
			t.Fatalf("%s did not join the cluster: its Start failed", n.id)
		}
	case <-limit.C:
		t.Fatalf("after %v: %s still starting", clusterWait, n.id)
	}
}

// post sends one B or C request to n and returns the HTTP status and the JSON answer.
// It gives up after clusterWait: a broken test fails, never hangs.
func (n *node) post(path, body string) (int, map[string]any, error) {
	c := http.Client{Timeout: clusterWait}
	resp, err := c.Post(n.http.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s: not JSON: %w", path, err)
	}
	return resp.StatusCode, m, nil
}

// testWriter sends log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// loopbackDialer dials only 127.0.0.0/8 and ::1, and fails the test if asked for more.
// Every third connection takes slowDial to set up: a request admitted on one instance then
// reaches the origin well after its admission, which another instance's next request must
// not overtake.
type loopbackDialer struct {
	t     *testing.T
	count *atomic.Int64
	// sends, when set, records each connection's first write: the client's own view of
	// when a request's bytes left, beside the origin's kernel stamps and the limiter's wire
	// moments in a violation's report.
	sends *sendLog
}

// sendLog records the first write of every connection the test dialer made.
type sendLog struct {
	mu  sync.Mutex
	all []firstSend
}

// firstSend is one connection's first write: its request line's path and Host, and the
// moments just before the write began and after it returned.
type firstSend struct {
	host, path    string
	before, after time.Time
	local         string
}

func (l *sendLog) add(s firstSend) {
	l.mu.Lock()
	l.all = append(l.all, s)
	l.mu.Unlock()
}

// of returns the first writes to host, in the order they began.
func (l *sendLog) of(host string) []firstSend {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.DeleteFunc(slices.Clone(l.all), func(s firstSend) bool { return s.host != host })
	slices.SortFunc(out, func(a, b firstSend) int { return a.before.Compare(b.before) })
	return out
}

// sendConn records its first write in log.
type sendConn struct {
	net.Conn
	log  *sendLog
	once sync.Once
}

func (c *sendConn) Write(p []byte) (int, error) {
	first := false
	c.once.Do(func() { first = true })
	if !first {
		return c.Conn.Write(p)
	}
	before := time.Now()
	n, err := c.Conn.Write(p)
	after := time.Now()
	req := string(p)
	path := ""
	if _, rest, ok := strings.Cut(req, " "); ok {
		path, _, _ = strings.Cut(rest, " ")
	}
	host := ""
	if _, rest, ok := strings.Cut(req, "\r\nHost: "); ok {
		host, _, _ = strings.Cut(rest, "\r\n")
		host, _, _ = strings.Cut(host, ":")
	}
	c.log.add(firstSend{host: strings.ToLower(host), path: path, before: before, after: after, local: c.LocalAddr().String()})
	return n, err
}

// slowDial is longer than the skew allowance and shorter than the intervals.
const slowDial = 120 * time.Millisecond

func (d loopbackDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		d.t.Errorf("test dialer asked for non-loopback address %s", address)
		return nil, errors.New("test dialer: non-loopback address refused")
	}
	if d.count.Add(1)%3 == 0 {
		t := time.NewTimer(slowDial) // a slow network, not a test waiting for something
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, address)
	if err != nil || d.sends == nil {
		return c, err
	}
	return &sendConn{Conn: c, log: d.sends}, nil
}

// noResolver fails the test if anything is resolved: every host is mapped to the origin.
type noResolver struct{ t *testing.T }

func (r noResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.t.Errorf("test resolver asked for %s", host)
	return nil, errors.New("test resolver: no lookups")
}

// clusterOrigin is the test origin: /page answers at once, /redir redirects to a landing
// host reached only that way, /hold answers when the test releases it (or the client
// gives up). It counts the requests it is serving at once.
type clusterOrigin struct {
	*origintest.Origin
	release     chan struct{}
	mu          sync.Mutex
	holding     int
	concurrent  int
	maxParallel int
	// byNode counts the requests in progress whose path names a node (/page/{node}/...).
	byNode map[string]int
}

func newClusterOrigin() *clusterOrigin {
	o := &clusterOrigin{release: make(chan struct{}), byNode: map[string]int{}}
	o.Origin = origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nodeID := ""
		if rest, ok := strings.CutPrefix(r.URL.Path, "/page/"); ok {
			nodeID, _, _ = strings.Cut(rest, "/")
		}
		o.mu.Lock()
		o.concurrent++
		o.byNode[nodeID]++
		o.maxParallel = max(o.maxParallel, o.concurrent)
		o.mu.Unlock()
		defer func() {
			o.mu.Lock()
			o.concurrent--
			o.byNode[nodeID]--
			o.mu.Unlock()
		}()
		// Every request on a new connection, so that slow dials (loopbackDialer) happen often.
		w.Header().Set("Connection", "close")
		switch r.URL.Path {
		case "/redir":
			host := strings.Split(r.Host, ":")[0]
			http.Redirect(w, r, "http://landing-"+host+"/landed", http.StatusFound)
			return
		case "/hold":
			o.mu.Lock()
			o.holding++
			o.mu.Unlock()
			defer func() {
				o.mu.Lock()
				o.holding--
				o.mu.Unlock()
			}()
			select {
			case <-o.releaseCh():
			case <-r.Context().Done():
				return
			}
		}
		origintest.Page(w, r)
	}))
	return o
}

func (o *clusterOrigin) releaseCh() chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.release
}

// releaseAll lets every held request answer, and later ones pass at once.
func (o *clusterOrigin) releaseAll() {
	o.mu.Lock()
	close(o.release)
	o.mu.Unlock()
}

// inProgress is how many requests of node id the origin is serving now.
func (o *clusterOrigin) inProgress(id string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byNode[id]
}

func (o *clusterOrigin) state() (holding, concurrent, maxParallel int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.holding, o.concurrent, o.maxParallel
}

// TestClusterThreeInstances is the cluster test: three instances on one mock TiKV cluster,
// mixed A/B/C traffic on 100 domains (some redirecting), zero violations measured at the
// origin; an instance stopped mid-run, whose in-flight requests expire while the others
// continue; and the cap changed through one instance, obeyed by the others.
//
// Its instances and PD share one paced clock (pacedClock): the real clock's pace, held
// while a heartbeat is late, so that no live instance is fenced because the machine ran
// its heartbeat late. Being fenced then is right (it fails closed), but it is not what this
// test is about, and it refused node 2's held renders on a starved machine.
func TestClusterThreeInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds")
	}
	origin := newClusterOrigin()
	defer origin.Close()
	rule, err := netguard.ParseConnectTo(origin.ConnectTo())
	if err != nil {
		t.Fatal(err)
	}
	guard := netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}, Dialer: loopbackDialer{t: t, count: &atomic.Int64{}}, Resolver: noResolver{t}})
	c := tikvtest.NewCluster(t)
	clk := newPacedClock(t)
	nodes := make([]*node, 3)
	pacers := make([]*pacedRuntime, 3)
	for i := range nodes {
		nodes[i], pacers[i] = startPacedNode(t, c, fmt.Sprintf("node-%d", i), guard, 24, clk)
	}
	begin, clkBegin := time.Now(), clk.Now()
	phase := func(name string) {
		t.Logf("%6.2fs (clock %6.2fs) %s", time.Since(begin).Seconds(), clk.Now().Sub(clkBegin).Seconds(), name)
	}
	testkit.WaitFor(t, clusterWait, "three instances sharing the cap", func() bool {
		for _, n := range nodes {
			if n.gate.Capacity() != 8 {
				return false
			}
		}
		return true
	})

	intervals := []time.Duration{200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond}
	intervalOf := map[string]time.Duration{}
	domains := make([]string, 100)
	for i := range domains {
		domains[i] = fmt.Sprintf("d%03d.test", i)
		intervalOf[domains[i]] = intervals[i%len(intervals)]
		if i%10 == 0 {
			intervalOf["landing-"+domains[i]] = clusterDefaultIval
		}
	}
	// Node 2 holds requests on these at the origin when it dies.
	held := []string{"held0.test", "held1.test", "held2.test", "held3.test", "held4.test"}
	for _, d := range held {
		intervalOf[d] = 100 * time.Millisecond
	}

	// Mixed traffic: per instance, workers send A, B and C at random domains until told to
	// stop. Every tenth domain redirects to a landing host of its own.
	var sent [3]atomic.Int64         // per entry: requests that reached the origin
	var refused, failed atomic.Int64 // refused: over the limit, here or elsewhere
	stopTraffic := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	// A dead instance's goroutines end with it: its tasks run under ctxs[2].
	ctxs := make([]context.Context, len(nodes))
	cancels := make([]context.CancelFunc, len(nodes))
	for i := range nodes {
		ctxs[i], cancels[i] = context.WithCancel(t.Context())
		defer cancels[i]()
	}
	// Failing closed (runtime_store_unavailable, 503, a task waiting) is right whenever
	// TiKV does not answer in time: on node 2 once it lost TiKV, on the others for the few
	// seconds a key node 2 left locked mid-commit stays locked (TiKV's lock TTL), and on a
	// machine so loaded that a transaction outlasts the timeout. It is counted, not failed.
	var failedClosed atomic.Int64
	var traffic sync.WaitGroup
	// stop closes node ni's traffic once; a failing wait (t.Fatal) stops the rest on the
	// way out, so that no worker reports into a finished test.
	var stopped [3]sync.Once
	stop := func(ni int) { stopped[ni].Do(func() { close(stopTraffic[ni]) }) }
	defer func() {
		for ni := range stopTraffic {
			stop(ni)
		}
		traffic.Wait()
	}()
	for ni, n := range nodes {
		for w := range 4 {
			traffic.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(ni), uint64(w)))
				for k := 0; ; k++ {
					select {
					case <-stopTraffic[ni]:
						return
					default:
					}
					d := domains[rng.IntN(len(domains))]
					// The path names the instance and the entry, for the report of a violation.
					path := fmt.Sprintf("/page/%s/%d", n.id, (k+w)%3)
					if d[len(d)-6] == '0' { // d000, d010, ...
						path = "/redir"
					}
					iv := intervalOf[d].Milliseconds()
					switch e := (k + w) % 3; e {
					case 0: // A: a leased task, run by the engine as the lease loop does
						out := n.eng.RunTask(ctxs[ni], &downloader.Task{TaskID: fmt.Sprintf("%s-%d-%d", n.id, w, k),
							URL: "http://" + d + path, MinIntervalMs: &iv, LeaseExpiresAt: clk.Now().Add(3 * time.Second)})
						switch {
						case out.Release:
							refused.Add(1)
						case out.Report != nil && out.Report.HasReachedOrigin:
							sent[0].Add(1)
						case out.Report != nil && out.Report.FailReason != nil && *out.Report.FailReason == downloader.FailSelfRateLimited:
							refused.Add(1) // a redirect hop whose host stayed busy past the request's deadline
						case out.Report != nil && out.Report.FailReason != nil && *out.Report.FailReason == downloader.FailRuntimeStoreUnavailable:
							failedClosed.Add(1) // a redirect hop's admission failed closed
						case out.Report != nil && ctxs[ni].Err() == nil:
							failed.Add(1)
							t.Errorf("%s: task failed: %+v (%v)", n.id, out.Report.Summary, *out.Report.FailReason)
						}
					case 1, 2:
						entry := "/v1/render"
						body := fmt.Sprintf(`{"url":"http://%s%s","min_interval_ms":%d,"should_render":false}`, d, path, iv)
						if e == 2 {
							entry = "/v1/probe"
						}
						code, m, err := n.post(entry, body)
						switch {
						case err != nil:
							failed.Add(1)
							t.Errorf("%s %s: %v", n.id, entry, err)
						case code == http.StatusTooManyRequests:
							refused.Add(1)
						case code == http.StatusServiceUnavailable:
							failedClosed.Add(1)
						case code != http.StatusOK:
							failed.Add(1)
							t.Errorf("%s %s %s: %d %v", n.id, entry, d, code, m)
						case m["has_reached_origin"] == true:
							sent[e].Add(1)
						case m["fail_reason"] == string(downloader.FailSelfRateLimited):
							refused.Add(1)
						case m["fail_reason"] == string(downloader.FailRuntimeStoreUnavailable):
							failedClosed.Add(1)
						default:
							failed.Add(1)
							t.Errorf("%s %s %s: %v", n.id, entry, d, m)
						}
					}
				}
			})
		}
	}
	testkit.WaitFor(t, clusterWait, "traffic through every entry", func() bool {
		return sent[0].Load() >= 30 && sent[1].Load() >= 30 && sent[2].Load() >= 30
	})

	phase("traffic through every entry")
	// Node 2 holds requests on five domains of its own at the origin, then dies without a
	// word: no write-back, no heartbeat, no goodbye.
	for _, d := range held {
		traffic.Go(func() {
			// A longer timeout than the traffic's, so that all five are surely held at once.
			code, m, err := nodes[2].post("/v1/render", fmt.Sprintf(`{"url":"http://%s/hold","min_interval_ms":100,"should_render":false,"timeout_ms":%d}`,
				d, heldTimeout.Milliseconds()))
			if err != nil || code != http.StatusOK {
				t.Errorf("held render of %s: %d %v %v", d, code, m, err)
			}
		})
	}
	testkit.WaitFor(t, clusterWait, "node 2's held requests at the origin", func() bool { h, _, _ := origin.state(); return h == len(held) })
	testkit.WaitFor(t, clusterWait, "node 2's held requests counted in flight", func() bool {
		st, err := nodes[0].rt.Domain(t.Context(), held[0])
		return err == nil && st.InFlightCount == 1
	})
	phase("held")
	stop(2)
	pacers[2].release()
	nodes[2].client.SetDown(true)
	cancels[2]()
	// Until when each held request may still reach the origin as far as the others know:
	// its wire moment plus the interval, when node 2 wrote it back (Wired) before it was
	// cut off, else the entry's expiry.
	closedUntil := map[string]time.Time{}
	wired := 0
	for _, d := range held {
		v, ok, err := nodes[0].store.get(t.Context(), domainKey(d))
		var rec domainRecord
		if err != nil || !ok || json.Unmarshal(v, &rec) != nil || len(rec.InFlightRequests) != 1 {
			t.Fatalf("record of %s: %s, %v, %v", d, v, ok, err)
		}
		closedUntil[d] = rec.InFlightRequests[0].ExpiresAt
		if w := rec.InFlightRequests[0].WireAt; !w.IsZero() {
			closedUntil[d] = w.Add(100 * time.Millisecond)
			wired++
		}
	}
	t.Logf("held requests whose wire moment was written back before node 2 was cut off: %d of %d", wired, len(held))
	// Node 2 without TiKV fails closed through every entry (SPEC §2): B
	// answers 503, C runtime_store_unavailable, A waits and hands its task back when the
	// lease allows no more.
	var closed sync.WaitGroup
	closed.Go(func() {
		code, m, err := nodes[2].post("/v1/render", `{"url":"http://closed-b.test/","min_interval_ms":0,"should_render":false}`)
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(m["error"]), "shared limiter state") {
			t.Errorf("B without TiKV: %d %v %v; want 503 naming the shared limiter state", code, m, err)
		}
	})
	closed.Go(func() {
		code, m, err := nodes[2].post("/v1/probe", `{"url":"http://closed-c.test/","min_interval_ms":0,"should_render":false}`)
		if err != nil || code != http.StatusOK || m["fail_reason"] != string(downloader.FailRuntimeStoreUnavailable) ||
			m["has_reached_origin"] != false || m["http_status"] != nil {
			t.Errorf("C without TiKV: %d %v %v; want runtime_store_unavailable, not reached", code, m, err)
		}
	})
	closed.Go(func() {
		iv := int64(0)
		out := nodes[2].eng.RunTask(t.Context(), &downloader.Task{TaskID: "closed-a", URL: "http://closed-a.test/",
			MinIntervalMs: &iv, LeaseExpiresAt: clk.Now().Add(clusterTimeout + time.Second)})
		if !out.Release {
			t.Errorf("A without TiKV: %+v; want the task handed back", out)
		}
	})
	// Its heartbeat expires: its requests stop counting as in flight...
	testkit.WaitFor(t, clusterWait, "node 2's in-flight entries to stop counting", func() bool {
		st, err := nodes[0].rt.Domain(t.Context(), held[0])
		return err == nil && st.InFlightCount == 0
	})
	phase("node 2 no longer counted")
	// ...and its share of the cap returns to the others.
	testkit.WaitFor(t, clusterWait, "the cap split over the two live instances", func() bool {
		return nodes[0].gate.Capacity() == 12 && nodes[1].gate.Capacity() == 12
	})
	// The held domains stay closed to the others until node 2's requests expire (slot +
	// timeout + slack, + skew), or one interval after their wire moment when node 2 wrote
	// it back.
	for _, d := range held {
		var admittedAt time.Time
		testkit.WaitFor(t, clusterWait, "a held domain to be admitted elsewhere", func() bool {
			code, m, err := nodes[0].post("/v1/probe", fmt.Sprintf(`{"url":"http://%s/page","min_interval_ms":100,"should_render":false}`, d))
			if err != nil || code != http.StatusOK {
				t.Fatalf("probe of %s: %d %v %v", d, code, m, err)
			}
			if m["has_reached_origin"] == true {
				admittedAt = clk.Now()
				return true
			}
			return false
		})
		if bound := closedUntil[d].Add(clusterSkew); admittedAt.Before(bound) {
			t.Errorf("%s admitted %v before node 2's request was known sent an interval ago or expired", d, bound.Sub(admittedAt))
		}
	}
	closed.Wait()
	if n := origin.CountByHost(); n["closed-a.test"]+n["closed-b.test"]+n["closed-c.test"] != 0 {
		t.Errorf("node 2 sent requests without TiKV: %v", n)
	}
	phase("held domains admitted elsewhere")
	// The others continued meanwhile.
	before := sent[0].Load() + sent[1].Load() + sent[2].Load()
	testkit.WaitFor(t, clusterWait, "traffic on the two live instances", func() bool {
		return sent[0].Load()+sent[1].Load()+sent[2].Load() >= before+30
	})
	stop(0)
	stop(1)
	traffic.Wait()
	phase("traffic stopped")

	// The cap changed through node 0: node 1 obeys it too.
	req, _ := http.NewRequest(http.MethodPut, nodes[0].http.URL+"/v1/settings", strings.NewReader(`{"max_concurrent_count":2}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/settings: %v %v", resp, err)
	}
	resp.Body.Close()
	// Node 0 gives up its room at once; each takes its new share once the other's claim (its
	// old share) came down at its next heartbeat.
	testkit.WaitFor(t, clusterWait, "nodes 0 and 1 to apply the new cap", func() bool {
		return nodes[1].gate.Capacity() == 1 && nodes[1].eng.Settings().MaxConcurrentCount == 2 && nodes[0].gate.Capacity() == 1
	})
	// Six requests per node on domains of their own, each held at the origin: one per node
	// runs, the rest wait at its gate. Their timeout, like the held renders', outlasts
	// the hold: the request held at the origin must still be there when the test sees it,
	// and a request's timeout runs from its shared slot, before its admission's commit and
	// its dial (on a starved machine they took the whole second: wire_wait_failed).
	_, base, _ := origin.state()
	var burst sync.WaitGroup
	for ni, n := range nodes[:2] {
		for i := range 6 {
			d := fmt.Sprintf("cap%d-%d.test", ni, i)
			burst.Go(func() {
				code, m, err := n.post("/v1/render", fmt.Sprintf(`{"url":"http://%s/hold","min_interval_ms":0,"should_render":false,"timeout_ms":%d}`,
					d, heldTimeout.Milliseconds()))
				if err != nil || code != http.StatusOK || m["has_reached_origin"] != true {
					t.Errorf("capped render of %s: %d %v %v", d, code, m, err)
				}
			})
		}
	}
	testkit.WaitFor(t, clusterWait, "one request per node at the origin, five at each gate", func() bool {
		_, conc, _ := origin.state()
		return conc == base+2 && nodes[0].gate.Waiting() == 5 && nodes[1].gate.Waiting() == 5
	})
	phase("cap burst queued")
	origin.mu.Lock()
	origin.maxParallel = origin.concurrent
	origin.mu.Unlock()
	origin.releaseAll()
	burst.Wait()
	if _, _, m := origin.state(); m > base+2 {
		t.Errorf("%d requests at the origin at once under a cluster cap of 2", m-base)
	}

	phase("cap burst done")
	// Zero violations at the origin, over every phase.
	v := origin.Violations(func(host string) (time.Duration, bool) {
		iv, ok := intervalOf[host]
		return iv, ok && iv > 0
	}, clusterTolerance)
	for _, x := range v {
		t.Errorf("violation: %v", x)
	}
	if len(v) > 0 {
		last := map[string]origintest.Arrival{}
		for _, a := range origin.Arrivals() {
			if p, ok := last[a.Host]; ok && a.At.Sub(p.At) < intervalOf[a.Host]-clusterTolerance {
				t.Logf("close pair on %s: %s at %s, then %s at %s", a.Host, p.Path, p.At.Format("15:04:05.000000"), a.Path, a.At.Format("15:04:05.000000"))
			}
			last[a.Host] = a
		}
	}
	t.Logf("reached the origin: A %d, B %d, C %d; refused %d; failed closed %d; failed %d; arrivals %d; violations %d",
		sent[0].Load(), sent[1].Load(), sent[2].Load(), refused.Load(), failedClosed.Load(), failed.Load(), len(origin.Arrivals()), len(v))
}

package render

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"downloader/clock"
	"downloader/internal/procstat"
	"downloader/internal/testkit"
	"downloader/limiter"
	"downloader/netguard"
)

// The render tests share one origin (many virtual hosts on one 127.0.0.1 listener) and,
// where they can, one pool: a browser launch costs most of a second.

// testUserAgent is the user agent the test pools send.
const testUserAgent = "downloader-render-test/1.0"

// tmpRoot is TMPDIR for the whole test binary, so that every temporary directory of ours
// (Chromium's user data directories above all) is under it and TestMain can check that
// none is left.
var tmpRoot string

// defaultParallel is how many parallel render tests run at once unless -parallel says
// otherwise: they wait on browser starts and page loads far more than they compute, and
// four at a time took the parallel phase from 266 s to 168 s, at no more CPU, beside the
// rest of the suite (go test's default, GOMAXPROCS, is 2 on CI; docs/decisions.md).
const defaultParallel = "4"

func TestMain(m *testing.M) {
	flag.Parse()
	isParallelSet := false
	flag.Visit(func(f *flag.Flag) { isParallelSet = isParallelSet || f.Name == "test.parallel" })
	if !isParallelSet {
		flag.Set("test.parallel", defaultParallel)
	}
	var err error
	tmpRoot, err = os.MkdirTemp("", "render-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("TMPDIR", tmpRoot)
	code := m.Run()
	closeFixture()
	if code == 0 {
		code = checkNoLeftovers()
	}
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

// checkNoLeftovers fails the run if a browser process, a temporary directory or a
// goroutine of ours is left.
func checkNoLeftovers() int {
	code := 0
	// A browser killed a moment ago may still be dying (SIGKILL is asynchronous): give
	// the processes a bounded time to go before calling them leftovers.
	procs := browserProcesses()
	for deadline := time.Now().Add(5 * time.Second); len(procs) > 0 && time.Now().Before(deadline); procs = browserProcesses() {
		runtime.Gosched()
	}
	if len(procs) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: browser processes left: %v\n", procs)
		code = 1
	}
	entries, _ := os.ReadDir(tmpRoot)
	for _, e := range entries {
		// The go tool's own build cache files are not ours.
		if strings.HasPrefix(e.Name(), "go-build") {
			continue
		}
		fmt.Fprintf(os.Stderr, "FAIL: temporary directory left: %s\n", filepath.Join(tmpRoot, e.Name()))
		code = 1
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: goroutines left: %v\n", err)
		code = 1
	}
	return code
}

// browserProcesses lists the browser processes of this test binary: the browsers it
// started and their helpers (Chromium's helper processes do not name the user data
// directory). The process group is not enough: every test binary of one `go test` run
// shares the go command's group, so with packages run side by side another binary's
// browsers would count as ours. Ours descend from this process, or carry our TMPDIR in
// their environment (a browser whose parent went away).
func browserProcesses() []int {
	self := procStat("self")
	if self == nil {
		return nil
	}
	selfPid := strconv.Itoa(os.Getpid())
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	mark := []byte("\x00TMPDIR=" + tmpRoot + "\x00")
	parent := map[string]string{}
	var candidates []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		st := procStat(e.Name())
		if st == nil {
			continue
		}
		parent[e.Name()] = st[1]
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil || !strings.Contains(filepath.Base(exe), "chrom") {
			continue
		}
		if st[2] == self[2] && st[0] != "Z" && st[0] != "X" { // same process group, not a corpse
			candidates = append(candidates, e.Name())
		}
	}
	ours := func(pid string) bool {
		for range 16 { // browser → zygote → renderer is three deep
			if pid == selfPid {
				return true
			}
			if env, err := os.ReadFile("/proc/" + pid + "/environ"); err == nil && bytes.Contains(append([]byte{0}, env...), mark) {
				return true
			}
			next, ok := parent[pid]
			if !ok || next == "0" || next == "1" {
				return false
			}
			pid = next
		}
		return false
	}
	var pids []int
	for _, c := range candidates {
		if ours(c) {
			pid, _ := strconv.Atoi(c)
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStat returns the fields of /proc/<pid>/stat after the command name (state, ppid,
// pgrp, ...), nil unless there are at least the 13 the benchmarks read (utime, stime).
func procStat(pid string) []string {
	if f := procstat.Fields(pid); len(f) >= 13 {
		return f
	}
	return nil
}

// fixture is the shared origin and guard.
type fixture struct {
	tls     *httptest.Server // an HTTPS origin whose certificate no browser trusts
	srv     *http.Server
	ln      net.Listener
	port    string
	closing chan struct{}
	guard   *netguard.Guard

	mu         sync.Mutex
	requests   []http.Request // headers and URL of every request the origin saw
	violations []string       // dials the guard should never have made
	slowHit    chan struct{}  // a request reached /slow on slowxhr.test
	hangHit    chan struct{}  // a request reached hang.test
}

var (
	fxOnce   sync.Once
	fx       *fixture
	poolOnce sync.Once
	shared   hopsPool
)

// virtualHosts are the origin's names, each mapped to the listener by --connect-to.
var virtualHosts = []string{"js.test", "frames.test", "widget.test", "empty.test", "hang.test", "slowxhr.test", "status.test", "blocked.test", "redirect.test", "cookie.test", "dialog.test", "busy.test", "huge.test"}

// ownFixtures are the fixtures tests own (ownFixture), by top-level test name.
var ownFixtures sync.Map

// getFixture returns the test's own fixture (ownFixture) if it has one, else the shared
// one.
func getFixture(t testing.TB) *fixture {
	if f, ok := ownFixtures.Load(topTestName(t)); ok {
		return f.(*fixture)
	}
	fxOnce.Do(func() { fx = newFixture() })
	if fx == nil {
		t.Fatal("no fixture")
	}
	return fx
}

func newFixture() *fixture {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	f := &fixture{ln: ln, closing: make(chan struct{}), slowHit: make(chan struct{}, 16), hangHit: make(chan struct{}, 16)}
	_, f.port, _ = net.SplitHostPort(ln.Addr().String())
	f.srv = &http.Server{Handler: f, ErrorLog: nil}
	go f.srv.Serve(ln)

	// A port nothing listens on, for connect_refused.
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	_, deadPort, _ := net.SplitHostPort(dead.Addr().String())
	dead.Close()

	var rules []netguard.Rule
	for _, h := range virtualHosts {
		r, err := netguard.ParseConnectTo(h + ":80:127.0.0.1:" + f.port)
		if err != nil {
			panic(err)
		}
		rules = append(rules, r)
	}
	f.tls = httptest.NewTLSServer(f)
	_, tlsPort, _ := net.SplitHostPort(f.tls.Listener.Addr().String())
	for _, s := range []string{"refused.test:80:127.0.0.1:" + deadPort, "refused.test:443:127.0.0.1:" + deadPort, "tls.test:443:127.0.0.1:" + tlsPort} {
		r, err := netguard.ParseConnectTo(s)
		if err != nil {
			panic(err)
		}
		rules = append(rules, r)
	}
	f.guard = netguard.New(netguard.Config{ConnectTo: rules, Resolver: fakeResolver{}, Dialer: loopbackOnly{f}})
	return f
}

// ownFixture gives the test an origin and guard of its own, closed when it ends: from then
// on getFixture answers it for the test, its subtests and the helpers they call (the
// relay's open network serves the fixture's pages, obscuraSetup and render() read it), so
// the test reads a request log, hang and slow channels and a violation list no other test
// writes to, and can run in parallel (parallelTests). Call it before anything else that
// calls getFixture.
func ownFixture(t *testing.T) *fixture {
	t.Helper()
	name := topTestName(t)
	if name != t.Name() {
		t.Fatal("ownFixture is for a top-level test")
	}
	f := newFixture()
	ownFixtures.Store(name, f)
	t.Cleanup(func() {
		ownFixtures.Delete(name)
		f.close()
	})
	return f
}

// topTestName is the name of t's top-level test.
func topTestName(t testing.TB) string {
	name, _, _ := strings.Cut(t.Name(), "/")
	return name
}

func (f *fixture) close() {
	close(f.closing)
	f.srv.Close()
	f.tls.Close()
}

// pool is a pool on f configured as the shared one (sharedPool), on the shared browser
// (sharedBrowser), closed when the test ends. At its end the browser has made no
// connection outside a render (its default context points at a proxy that refuses
// everything): what TestRenderNoStrayRequests checks of the shared pool, checked of every
// such pool.
func (f *fixture) pool(t *testing.T) hopsPool {
	t.Helper()
	sm := onSharedBrowser(t, seams{})
	p, err := newHopsPool(f.sharedConfig(testLogger(t)), sm, limiterHops{l: limiter.New(clock.Real{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		sharedBrowser(t).checkNoStray(t)
	})
	return p
}

func closeFixture() {
	poolOnce.Do(func() {})
	if shared.Pool != nil {
		shared.Close()
	}
	if fx != nil {
		fx.close()
	}
	closeSharedBrowsers()
}

// fakeResolver answers internal.test and forbidden.test with a private address and
// knows no other name: nothing in these tests may leave the machine.
type fakeResolver struct{}

func (fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	switch strings.TrimSuffix(strings.ToLower(host), ".") {
	case "internal.test", "forbidden.test":
		return []netip.Addr{netip.MustParseAddr("10.0.0.5")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// loopbackOnly dials loopback addresses and records any other request as a violation,
// without dialling it: the guard must refuse before it gets here.
type loopbackOnly struct{ f *fixture }

func (d loopbackOnly) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		d.f.mu.Lock()
		d.f.violations = append(d.f.violations, address)
		d.f.mu.Unlock()
		return nil, errors.New("test dialer: refusing a non-loopback address " + address)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func (f *fixture) noViolations(t testing.TB) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.violations) > 0 {
		t.Errorf("the guard let the browser dial %v", f.violations)
	}
}

// requestsTo returns the requests the origin saw for host since mark.
func (f *fixture) requestsTo(host string, mark int) []http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []http.Request
	for _, r := range f.requests[mark:] {
		if r.Host == host {
			out = append(out, r)
		}
	}
	return out
}

func (f *fixture) mark() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// url returns http://hostPath, or hostPath itself when it has a scheme.
func (f *fixture) url(hostPath string) *url.URL {
	if !strings.Contains(hostPath, "://") {
		hostPath = "http://" + hostPath
	}
	u, err := url.Parse(hostPath)
	if err != nil {
		panic(err)
	}
	return u
}

func testdata(name string) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		panic(err)
	}
	return b
}

func (f *fixture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, http.Request{Method: r.Method, Host: r.Host, URL: r.URL, Header: r.Header.Clone()})
	f.mu.Unlock()
	html := func(name string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(testdata(name))
	}
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	if strings.HasPrefix(host, "js") && strings.HasSuffix(host, ".test") {
		host = "js.test" // js1.test, js2.test, ...: the same page on other sites
	}
	if strings.HasPrefix(host, "frames") && strings.HasSuffix(host, ".test") {
		host = "frames.test" // frames1.test, ...: sites that embed the same widget
	}
	switch host + r.URL.Path {
	case "js.test/":
		html("js.html")
	case "frames.test/":
		html("frames.html")
	case "widget.test/embed":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<!doctype html><html><body><p>An embedded widget.</p></body></html>")
	case "js.test/api/article", "frames.test/api/article":
		var paras []string
		for i := range 8 {
			paras = append(paras, fmt.Sprintf("Paragraph %d of the article, which only JavaScript puts on the page, long enough to count.", i+1))
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"paragraphs": paras})
	case "js.test/api/related", "frames.test/api/related":
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"items": []string{"First related story", "Second related story"}})
	case "empty.test/":
		html("empty.html")
	case "blocked.test/":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(bytes.ReplaceAll(testdata("blocked.html"), []byte("{{port}}"), []byte(f.port)))
	case "slowxhr.test/":
		html("slowxhr.html")
	case "slowxhr.test/slow":
		select {
		case f.slowHit <- struct{}{}:
		default:
		}
		f.block(r)
	case "hang.test/":
		select {
		case f.hangHit <- struct{}{}:
		default:
		}
		f.block(r)
	case "status.test/missing":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<!doctype html><html><body><h1>Not found</h1><p>There is no such page here.</p></body></html>")
	case "status.test/auth":
		w.Header().Set("WWW-Authenticate", `Basic realm="private"`)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, "<!doctype html><html><body><p>Sign in first.</p></body></html>")
	case "status.test/busy":
		w.Header().Set("Retry-After", "120")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "<!doctype html><html><body><p>Come back later.</p></body></html>")
	case "redirect.test/":
		http.Redirect(w, r, "http://js.test/", http.StatusFound)
	case "busy.test/":
		html("busy.html")
	case "huge.test/":
		html("huge.html")
	case "busy.test/tick":
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "tick")
	case "dialog.test/":
		html("dialog.html")
	case "dialog.test/file.bin":
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="file.bin"`)
		w.Write(bytes.Repeat([]byte{0}, 1024))
	case "cookie.test/":
		http.SetCookie(w, &http.Cookie{Name: "visit", Value: "1", Path: "/"})
		html("cookie.html")
	default:
		http.NotFound(w, r)
	}
}

// block holds a request until the client goes away or the fixture closes.
func (f *fixture) block(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-f.closing:
	}
}

// testLogger writes the pool's log to the test output only when the test fails.
func testLogger(t testing.TB) *slog.Logger { return testkit.Logger(t, slog.LevelInfo) }

// sharedConfig is the shared pool's configuration on f: a local browser, two slots, two
// warm tabs; every document request is paused and decided on, as in the service.
func (f *fixture) sharedConfig(log *slog.Logger) Config {
	return Config{
		Clock:       clock.Real{},
		Logger:      log,
		Concurrency: 2,
		QueueLength: 4,
		WarmTabs:    2,
		UserAgent:   testUserAgent,
		Guard:       f.guard,
	}
}

// sharedPool is the pool most tests use: a local browser, two slots, hops admitted with
// no interval.
func sharedPool(t testing.TB) hopsPool {
	f := getFixture(t)
	poolOnce.Do(func() {
		p, err := newHopsPool(f.sharedConfig(slog.New(slog.DiscardHandler)), seams{}, limiterHops{l: limiter.New(clock.Real{})})
		if err != nil {
			panic(err)
		}
		shared = p
	})
	if shared.Pool == nil {
		t.Fatal("no shared pool")
	}
	return shared
}

// browserProcess returns the pool's local browser process, waiting for the browser.
func (p *Pool) browserProcess(t testing.TB) *os.Process {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := p.browserFor(ctx)
	if err != nil {
		t.Fatalf("no browser: %v", err)
	}
	return b.proc
}

// parallelTests: a test that owns its origin and pool (of the shared fixture it uses only
// the URL parser, the shared guard and the guard's violation list) and asserts nothing
// about time that a neighbour's load can break calls t.Parallel(): the suite waits on
// page loads far more than it computes, so two such tests side by side take little more
// than one. Their pools run on one shared browser (sharedBrowser: a websocket and
// browser contexts per pool) unless the test looks at or changes the browser itself. A
// test that reads the fixture's request log or its slowHit/hangHit channels owns a
// fixture (ownFixture) and a pool on it (fixture.pool) to be one of them. The testing
// package holds parallel tests until every sequential one has finished, so the few tests
// left on the shared pool (those that time a render against a short bound, kill or crash
// its browser, or check it after the others), or that count browser processes, stay
// sequential and never overlap one. -parallel (defaultParallel, 4, unless given) bounds
// how many run at once.

// safetyTimeout bounds a render (or a wait) in a test whose assertion is not about time:
// most of what is left of the test binary's own deadline (go test -timeout), or ten
// minutes without one. A fixed 20 s made such tests fail with render_timeout on a machine
// loaded by other work (a browser start alone took over 20 s at load 30), which says
// nothing about what they check; the pool's own timeout is what SPEC §4's render_timeout
// is about, and the tests ABOUT time (TestRenderHangingPage, politeness gaps, a hop past
// the deadline) keep their own short bounds. A render that really hangs still fails here,
// with its outcome, before the binary's timeout panics.
func safetyTimeout(t *testing.T) time.Duration {
	deadline, ok := t.Deadline()
	if !ok {
		return 10 * time.Minute
	}
	return max(time.Until(deadline)*9/10, time.Second)
}

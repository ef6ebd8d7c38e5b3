// Package render is the downloader's headless-browser renderer (SPEC §3): a pool of renders
// over the Chrome DevTools Protocol, on a local Chromium that the pool launches (the
// default) or on a remote CDP endpoint such as Obscura. Both go through the same code
// path; only the way to get a browser differs.
//
// The model:
//
//   - One browser per pool, launched or dialled by a supervisor goroutine, relaunched or
//     reconnected by itself when it dies (at once after a loss, with exponential backoff
//     after failed attempts). While a launch fails, renders answer renderer_unavailable at
//     once instead of waiting.
//   - Isolation (Config.Isolation, --render-isolation). IsolationWipe, the default: one
//     long-lived tab per slot, each in a browser context of its own, reused render after
//     render (its renderer process too) and wiped in between: every cookie of the context,
//     the storage, sessionStorage, service workers and permissions of every origin the
//     render touched; the tab's history is forgotten. The HTTP cache and the code cache
//     stay, so a site's next page gets its bundles from the cache; a render prefers a tab
//     whose context rendered its site; the main document always comes from the origin. A
//     tab is replaced after MaxContextRenders renders. IsolationContext: one fresh browser
//     context per render with one tab in it, thrown away after it; a new context and tab
//     costs a new renderer process (≈ 150 ms of CPU here), so the pool keeps WarmTabs of
//     them ready, the replacement started once the page has loaded. Either way pages are
//     kept from blocking or writing: JavaScript dialogs are dismissed, downloads denied.
//     docs/benchmarks.md and docs/benchmarks-render.md have the measurements.
//   - What a render does not load: by default images, media and fonts (skip_resource_types,
//     intercept.go), failed in the browser before any connection.
//   - Every request the browser makes goes through a small HTTP forward proxy of ours,
//     one per render on ProxyHost:0, set as the proxy of the tab's browser context (with
//     IsolationWipe through the context's relay; either way it also works on a remote
//     endpoint). The proxy dials through the netguard Guard, so
//     --connect-to and the SSRF guard apply to sub-requests (scripts, XHRs, iframes,
//     redirects) exactly as to plain fetches, and it holds the first request bytes to the
//     page's own host until the limiter's Wire lets them out (after DNS, connect and TLS:
//     wire.go). Loopback is proxied too ("<-loopback>").
//   - With hops admitted (Config.ShouldAdmitHops), the browser pauses every document request before
//     sending it (CDP Fetch domain). The render's first main document goes on under the
//     caller's admission; every later main-frame document (a redirect hop, a meta refresh,
//     location=) first gets an admission of its own, bounded by the render's deadline, and
//     the proxy holds its request bytes toward that host until the admission's Wire lets
//     them out. A hop that cannot be admitted in time is failed, and the render answers
//     self_rate_limited. An iframe document on another host is admitted if that host's
//     turn is now, else skipped (docs/benchmarks-render.md). The browser pauses every
//     other request too: speculative loads are failed, and the page's own sub-requests
//     are bounded per render and per other host (MaxSubrequestCount,
//     MaxHostSubrequestCount). Popups are refused by the local browser's flags and
//     counted. SPEC §3: a render never loads another site behind that site's limiter.
//   - A render navigates, waits for the load event and then for the network to be quiet
//     (NetworkQuiet with no request in flight), reads the rendered DOM and the main
//     document as served, and builds the outcome. See Pool.Render for the limits.
//   - A remote endpoint has a profile (profile.go, docs/renderers.md): Chromium's, or
//     Obscura's, which ignores a context's proxy, reads Fetch patterns as a block list,
//     runs one navigation at a time per websocket and cannot wipe a context. The kind is
//     given (Config.Kind) or told from /json/version at each connection, and before any
//     render a canary page must reach our guard proxy (canary.go): an endpoint whose
//     requests would go around the guard is refused. On Obscura's profile its own proxy
//     is our guard proxy, hops are admitted there, and each render has a websocket and a
//     context of its own.
//
// Pool is safe for concurrent use.
package render

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/render/renderproxy"
)

// Defaults of Config.
const (
	DefaultBinaryPath     = "/usr/lib/chromium/chromium-headless-shell"
	DefaultTimeout        = 30 * time.Second
	DefaultUserAgent      = "Mozilla/5.0 (compatible; downloader/1.0; +render)"
	DefaultNetworkQuiet   = 500 * time.Millisecond
	DefaultNetworkIdleMax = 5 * time.Second
	DefaultLaunchTimeout  = 20 * time.Second
	DefaultProxyHost      = "127.0.0.1"
	// A page of 10–30 requests (SPEC §3) stays well inside both; a page that fires a
	// burst at a host not its own is cut at the second.
	DefaultMaxSubrequestCount     = 150
	DefaultMaxHostSubrequestCount = 20
)

// Backoff between failed launches or connections: doubling from minBackoff to maxBackoff.
const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Config configures a Pool. The zero value of each field means its default.
type Config struct {
	// IsStopping, when set, reports whether the service is stopping. A browser lost then
	// is the stop's doing (a terminal's Ctrl-C signals the browser's process group too),
	// logged at Info, not as a loss (Warn). nil: never.
	IsStopping func() bool
	Clock      clock.Clock  // default clock.Real{}; give the limiter's clock (timeouts, Wire)
	Logger     *slog.Logger // default slog.Default()

	// BinaryPath is the local browser: Debian's chromium-headless-shell, never the
	// /usr/bin wrapper scripts, which fork the real browser and hide it from us.
	BinaryPath string
	// Endpoint is a remote CDP endpoint (ws://host:9222, http://host:9222, or a full
	// websocket path such as Obscura's ws://host:9222/devtools/browser). When set, the pool
	// launches nothing and connects there instead.
	Endpoint string

	Concurrency int // renders at once (--render-concurrency); default runtime.NumCPU()
	// Scaling is how many of those slots are used (--render-scaling, autoscale.go):
	// ScalingAdaptive follows the machine between 1 and Concurrency; ScalingFixed, the
	// zero value's, uses them all.
	Scaling Scaling
	// QueueLength is how many renders may wait for a free slot; more answer
	// local_queue_full. Zero means none wait.
	QueueLength int
	// WarmTabs is how many fresh tabs (each in its own new browser context) are kept ready
	// ahead of renders (IsolationContext); default Concurrency, negative means none. With
	// IsolationWipe the pool makes its long-lived tabs, one per slot, ahead of renders
	// unless WarmTabs is negative (then each is made by the render that needs it).
	WarmTabs int
	// SpareTabCount is how many long-lived tabs the pool keeps beyond one per slot
	// (IsolationWipe, --render-spare-tab-count): a render then takes a clean tab while the
	// last render's is still being wiped, instead of waiting for that wipe. Each costs a
	// context and an idle renderer's memory. Zero (the default): one per slot.
	SpareTabCount int

	UserAgent string // sent by the browser instead of its own (which says HeadlessChrome)

	// Guard dials every connection the browser makes (connect-to and the SSRF guard).
	// Required.
	Guard *netguard.Guard

	// ShouldAdmitHops makes the browser pause every document request (CDP Fetch domain) so
	// that the main document's requests after the first (redirect hops, and navigations
	// the page makes by itself) each get their own limiter admission before they are sent
	// (SPEC §2), from the hop admitter the caller passes with each render (RenderInSlot:
	// the engine's, built per request). A render given none then refuses them (fail
	// closed). False: nothing after the first request is admitted and nothing is paused,
	// whatever a render is given (tests, benchmarks).
	ShouldAdmitHops bool

	// Trace, when set, is told of events inside the pool (trace.go); nil: none.
	Trace *Trace

	DefaultTimeout time.Duration // a render's timeout when Render is given none

	// SkipResourceTypes are the sub-requests a render does not make unless its request
	// says otherwise (RenderOptions): nil means downloader.DefaultSkipResourceTypes (images,
	// media, fonts), an empty non-nil list loads everything.
	SkipResourceTypes []downloader.ResourceType

	// NetworkQuiet is how long the network must stay quiet (no request in flight) after
	// the load event before the page is read. NetworkIdleMax bounds that wait: a page that
	// is still busy NetworkIdleMax after its load event is read as it is.
	NetworkQuiet   time.Duration
	NetworkIdleMax time.Duration

	// ProxyHost is the address the per-tab proxies listen on and the browser reaches them
	// at. The default, 127.0.0.1, suits a local browser; for a remote endpoint on another
	// machine it must be an address of this machine that the endpoint can reach (and only
	// it: firewall it).
	ProxyHost string

	LaunchTimeout time.Duration // bound on one launch or connection attempt, and on a warm tab's start

	// Isolation is how renders are kept apart (--render-isolation): IsolationWipe (the
	// default) or IsolationContext.
	Isolation Isolation
	// MaxContextRenders is how many renders a long-lived tab and its context serve
	// (IsolationWipe) before they are replaced; default DefaultMaxContextRenders.
	MaxContextRenders int
	// MaxContextHeapBytes recycles a long-lived tab and its context (IsolationWipe) after
	// a render that leaves its renderer's JavaScript heap above it (Runtime.getHeapUsage:
	// one round trip, no domain to enable); zero means DefaultMaxContextHeapBytes,
	// negative no bound.
	MaxContextHeapBytes int64

	// MaxSubrequestCount bounds a render's sub-requests (everything but its main documents
	// and admitted frames), MaxHostSubrequestCount those to each host other than the
	// page's (SPEC §3): they go out under the render's one admission. The excess is
	// refused before it is sent and counted in capped_subrequest_count.
	MaxSubrequestCount     int
	MaxHostSubrequestCount int

	// Kind is the CDP server behind Endpoint (--renderer-kind): RendererAuto (the zero
	// value) tells it from /json/version at each connection; a local browser is always
	// RendererChromium. The kind picks the profile (profile.go, docs/renderers.md).
	Kind RendererKind
	// GuardProxyListen is where the one long-lived guard proxy of a remote endpoint
	// listens (--render-guard-proxy-listen), host:port; default ProxyHost on a free port.
	// A server with no proxy per browser context (Obscura) must be started with its own
	// proxy there (`obscura serve --proxy http://GuardProxyListen`): until the connect-time
	// canary's requests reach it, the endpoint is refused (SPEC §3, canary.go).
	GuardProxyListen string
	// GuardProxyCADir, when set, makes the guard proxy terminate TLS under a CA of ours
	// kept there (created once; renderproxy/authority.go), so that it sees each request inside an
	// HTTPS CONNECT. The server must trust the CA: `SSL_CERT_FILE=GuardProxyCADir/ca.pem
	// obscura serve …`. Empty: CONNECTs are tunnels.
	GuardProxyCADir string
}

// Pool renders pages. Create it with New and stop it with Close. Safe for concurrent use.
type Pool struct {
	cfg  poolConfig
	clk  clock.Clock
	log  *slog.Logger
	gate *limiter.Gate

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the pool starts

	// deny is where the local browser's own default context is pointed: a listener that
	// refuses everything, so a request outside any render (there should be none) never
	// leaves the machine.
	deny       net.Listener
	deniedConn atomic.Int64 // connections the deny listener refused

	skipDefault skipSet // Config.SkipResourceTypes as the browser names them

	scale *autoscaler // nil with ScalingFixed

	mu           sync.Mutex
	state        browserState
	cur          *browser      // the live browser when state is stateUp
	changed      chan struct{} // closed and replaced at every change of state
	lastErr      error
	restarts     int
	spares       []*tab        // warm tabs of cur
	making       int           // warm-ups making a new tab
	wiping       []*tab        // long-lived tabs being wiped (IsolationWipe)
	live         int           // long-lived tabs alive, busy or not (IsolationWipe)
	contexts     int           // long-lived contexts alive
	recycled     int64         // long-lived contexts disposed of
	heapRecycled int64         // of which for their heap
	warming      int           // warm-ups in progress
	spareReady   chan struct{} // closed and replaced when a warm-up ends
	closed       bool
	rendered     int64

	// Site affinity (affinity.go), IsolationWipe; guarded by mu.
	busy    []*tab         // long-lived tabs serving a render
	awaited map[string]int // renders waiting for their site's context, by site

	// guard is the long-lived guard proxy of a remote endpoint: the canary's, and every
	// render's on a server whose own proxy it must be (Obscura). Nil for a local browser.
	guard *renderproxy.Guard

	kind    RendererKind // of the last connection
	refused bool         // the last connection's canary went around our guard
}

type browserState int

const (
	stateLaunching browserState = iota // renders wait
	stateUp                            // cur is live
	stateFailed                        // the last attempt failed: renders fail at once
)

// New returns a pool and starts its browser in the background; it does not wait for it.
// It fails only on an invalid configuration: a browser that cannot start makes renders
// answer renderer_unavailable.
func New(cfg Config) (*Pool, error) { return newPool(cfg, seams{}) }

// newPool is New with the seams of a test or benchmark (seams.go).
func newPool(cfg Config, sm seams) (*Pool, error) {
	if cfg.Guard == nil {
		return nil, downloader.Invalidf("guard", "render: a netguard Guard is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BinaryPath == "" {
		cfg.BinaryPath = DefaultBinaryPath
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = runtime.NumCPU()
	}
	if cfg.QueueLength < 0 {
		cfg.QueueLength = 0
	}
	switch {
	case cfg.WarmTabs == 0:
		cfg.WarmTabs = cfg.Concurrency
	case cfg.WarmTabs < 0:
		cfg.WarmTabs = 0
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if strings.Contains(cfg.UserAgent, "Headless") {
		return nil, downloader.Invalidf("user_agent", "render: the user agent must not say Headless")
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = DefaultTimeout
	}
	if cfg.NetworkQuiet <= 0 {
		cfg.NetworkQuiet = DefaultNetworkQuiet
	}
	if cfg.NetworkIdleMax <= 0 {
		cfg.NetworkIdleMax = DefaultNetworkIdleMax
	}
	if cfg.ProxyHost == "" {
		cfg.ProxyHost = DefaultProxyHost
	}
	switch cfg.Isolation {
	case "":
		cfg.Isolation = IsolationWipe
	case IsolationWipe, IsolationContext:
	default:
		return nil, downloader.Invalidf("render_isolation", "render: isolation %q is neither %q nor %q", cfg.Isolation, IsolationWipe, IsolationContext)
	}
	if cfg.SpareTabCount < 0 {
		return nil, downloader.Invalidf("render_spare_tab_count", "render: spare tab count %d is negative", cfg.SpareTabCount)
	}
	if cfg.MaxContextRenders <= 0 {
		cfg.MaxContextRenders = DefaultMaxContextRenders
	}
	if cfg.MaxContextHeapBytes == 0 {
		cfg.MaxContextHeapBytes = DefaultMaxContextHeapBytes
	}
	switch cfg.Scaling {
	case "":
		cfg.Scaling = ScalingFixed
	case ScalingFixed, ScalingAdaptive:
	default:
		return nil, downloader.Invalidf("render_scaling", "render: scaling %q is neither %q nor %q", cfg.Scaling, ScalingAdaptive, ScalingFixed)
	}
	if cfg.SkipResourceTypes == nil {
		cfg.SkipResourceTypes = downloader.DefaultSkipResourceTypes()
	}
	if cfg.LaunchTimeout <= 0 {
		cfg.LaunchTimeout = DefaultLaunchTimeout
	}
	if cfg.MaxSubrequestCount <= 0 {
		cfg.MaxSubrequestCount = DefaultMaxSubrequestCount
	}
	if cfg.MaxHostSubrequestCount <= 0 {
		cfg.MaxHostSubrequestCount = DefaultMaxHostSubrequestCount
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "ws" && u.Scheme != "wss" && u.Scheme != "http" && u.Scheme != "https") {
			return nil, downloader.Invalidf("renderer_endpoint", "render: endpoint %q is not a ws:// or http:// URL", cfg.Endpoint)
		}
	}
	if _, err := ParseRendererKind(string(cfg.Kind)); err != nil {
		return nil, err
	}
	if cfg.GuardProxyListen == "" {
		cfg.GuardProxyListen = net.JoinHostPort(cfg.ProxyHost, "0")
	} else if _, _, err := net.SplitHostPort(cfg.GuardProxyListen); err != nil {
		return nil, downloader.Invalidf("render_guard_proxy_listen", "render: guard proxy address %q is not host:port", cfg.GuardProxyListen)
	}
	p := &Pool{
		cfg:         poolConfig{Config: cfg, seams: sm},
		clk:         cfg.Clock,
		log:         cfg.Logger.With("component", "render"),
		gate:        limiter.NewGate(cfg.Concurrency, cfg.QueueLength),
		changed:     make(chan struct{}),
		spareReady:  make(chan struct{}),
		awaited:     make(map[string]int),
		skipDefault: newSkipSet(cfg.SkipResourceTypes),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if cfg.Scaling == ScalingAdaptive {
		p.scale = newAutoscaler(p)
		p.gate.SetCapacity(p.scale.limit())
		p.wg.Go(p.scale.run)
	}
	if cfg.Endpoint == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.cancel()
			return nil, fmt.Errorf("render: deny listener: %w", err)
		}
		p.deny = ln
		p.wg.Go(func() { p.refuseAll(ln) })
	} else {
		ln := sm.guardProxyLn
		if ln == nil {
			var err error
			if ln, err = net.Listen("tcp", cfg.GuardProxyListen); err != nil {
				p.cancel()
				return nil, fmt.Errorf("render: guard proxy: %w", err)
			}
		}
		p.guard = renderproxy.NewGuard(ln, p.log)
		if err := p.startGuardTLS(); err != nil {
			p.guard.Close()
			p.cancel()
			return nil, err
		}
	}
	p.wg.Go(p.supervise)
	return p, nil
}

// refuseAll accepts connections on ln and closes them at once, until ln is closed.
func (p *Pool) refuseAll(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
		p.deniedConn.Add(1)
		p.log.Warn("the browser tried to reach the network outside a render; refused")
	}
}

// Stats returns a snapshot of the pool.
func (p *Pool) Stats() downloader.RendererStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := downloader.RendererStats{
		SlotCount:                p.cfg.Concurrency,
		EffectiveSlotCount:       p.gate.Capacity(),
		IsAdaptive:               p.scale != nil,
		HeapRecycledContextCount: p.heapRecycled,
		BusyCount:                p.gate.InFlight(),
		QueuedCount:              p.gate.Waiting(),
		WarmTabCount:             len(p.spares),
		RestartCount:             p.restarts,
		IsBrowserUp:              p.state == stateUp,
		IsRemote:                 p.cfg.Endpoint != "",
		RenderedCount:            p.rendered,
		ContextCount:             p.contexts,
		RecycledContextCount:     p.recycled,
		RendererKind:             string(p.kind),
		IsGuardRefused:           p.refused,
	}
	if p.guard != nil {
		s.GuardProxyAddr = p.guard.Addr()
	}
	if p.lastErr != nil {
		s.LastError = p.lastErr.Error()
	}
	return s
}

// Close stops the pool: renders in flight end with shutting_down, the browser is killed
// (or the connection to a remote one closed, after closing our tabs and contexts), and
// every temporary directory is removed. It waits for all of it. Calling it again does
// nothing.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	spares := p.spares
	p.spares = nil
	p.mu.Unlock()
	for _, t := range spares {
		t.close()
	}
	p.cancel()
	if p.deny != nil {
		p.deny.Close()
	}
	p.wg.Wait()
	if p.guard != nil {
		p.guard.Close() // after the renders: their proxies are gone
	}
	return nil
}

// Errors that end a render, as context causes.
var (
	errRenderTimeout = errors.New("render: timeout")
	errPoolClosed    = errors.New("render: pool closed")
	errCrashed       = errors.New("render: renderer crashed")
	// errTabStartTimeout ends a warm-up whose tab the browser did not finish starting
	// within LaunchTimeout (tab.go, warm).
	errTabStartTimeout = errors.New("render: tab start timed out")
)

// Render renders u and returns its outcome; it never returns nil.
//
// adm is the limiter admission of u's domain, taken and finished by the caller. When the
// first request to u's host goes on the wire (the proxy's connection to the origin is
// made, and for HTTPS its TLS handshake done, the request not yet written), Render calls
// adm.Wire and waits as WaitWire would, on the pool's clock, then adm.Wrote; it no longer touches adm once it has returned, so the caller may
// Cancel or Done it at once. A nil adm renders without a limiter (tests, benchmarks).
//
// Every main-frame document after the first is admitted through the render's hop admitter with a
// deadline at which the page would be read anyway; its admission is Wire'd when its first bytes
// go toward its host, and given back (Cancel, or Done once on the wire) when Render
// returns. A hop not admitted by then fails the render with self_rate_limited. Render and
// RenderWith pass no admitter (RenderInSlot takes one): with Config.ShouldAdmitHops their
// renders admit no hop.
//
// The timeout (DefaultTimeout when zero) covers everything from the call: the wait for a
// slot, the browser and the page. Render returns at the latest when it ends, with
// render_timeout, cleaning up in the background. Reading the page:
//   - after the load event, the network must be quiet for NetworkQuiet;
//   - a page still busy NetworkIdleMax after load, or close to the timeout (the last
//     fifth of it, at most one second, is kept for reading), is read as it is;
//   - a page whose DOMContentLoaded never comes within the timeout is a render_timeout.
//
// Failures (SPEC §4, all with has_reached_origin=false): pool and queue full →
// local_queue_full; a main document hop not admitted in time → self_rate_limited; browser cannot start or endpoint unreachable → renderer_unavailable;
// browser or tab died → renderer_crashed (found from the connection, Inspector.targetCrashed
// and the target's detach, without waiting for the timeout); ctx cancelled or the pool
// closed → shutting_down. A main document that fails on the network is classified like a
// plain fetch; a non-2xx main document is http_status_error (with its rendered content).
func (p *Pool) Render(ctx context.Context, u *url.URL, adm *limiter.Admission, timeout time.Duration) *downloader.Outcome {
	return p.renderTimed(ctx, u, adm, nil, downloader.RenderOptions{Timeout: timeout}, false)
}

// RenderWith is Render with the request's options: its timeout and the resource types it
// skips (SPEC §3).
func (p *Pool) RenderWith(ctx context.Context, u *url.URL, adm *limiter.Admission, opts downloader.RenderOptions) *downloader.Outcome {
	return p.renderTimed(ctx, u, adm, nil, opts, false)
}

// AcquireSlot takes one of the pool's render slots ahead of RenderInSlot, waiting in the
// pool's bounded queue (engine.Renderer): the engine takes the slot before a slot of the
// global cap, so that renders waiting here hold none of the global slots. It fails at once
// with local_queue_full when the queue is full, and with render_timeout or shutting_down
// when ctx ends or the pool closes first. release gives the slot back; it may be called
// more than once.
func (p *Pool) AcquireSlot(ctx context.Context) (release func(), failed *downloader.Outcome) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(p.ctx, func() { cancel(errPoolClosed) })
	defer stop()
	if err := p.gate.Acquire(ctx, limiter.QueueBounded); err != nil {
		if errors.Is(err, limiter.ErrQueueFull) {
			return nil, downloader.FailedBy(downloader.CauseQueueFull)
		}
		return nil, downloader.FailedBy(stopCause(ctx))
	}
	var once sync.Once
	return func() { once.Do(p.gate.Release) }, nil
}

// RenderInSlot is RenderWith under a slot the caller took with AcquireSlot (and gives
// back after this returns). hops admits the render's later main documents (the engine
// builds one per request: its entry, and in cluster mode the shared tickets that end with
// it); nil: none admitted. Without Config.ShouldAdmitHops no document is paused, so none
// is admitted either way.
func (p *Pool) RenderInSlot(ctx context.Context, u *url.URL, adm *limiter.Admission, hops HopAdmitter, opts downloader.RenderOptions) *downloader.Outcome {
	return p.renderTimed(ctx, u, adm, hops, opts, true)
}

func (p *Pool) renderTimed(ctx context.Context, u *url.URL, adm *limiter.Admission, hops HopAdmitter, opts downloader.RenderOptions, held bool) *downloader.Outcome {
	start := p.clk.Now()
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = p.cfg.DefaultTimeout
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopClosed := context.AfterFunc(p.ctx, func() { cancel(errPoolClosed) })
	defer stopClosed()
	timer := p.clk.NewTimer(timeout)
	timerDone := make(chan struct{})
	go func() {
		defer close(timerDone)
		select {
		case <-timer.C():
			cancel(errRenderTimeout)
		case <-rctx.Done():
			timer.Stop()
		}
	}()
	defer func() { <-timerDone }()
	defer cancel(nil)

	skip := p.skipDefault
	if opts.SkipResourceTypes != nil {
		skip = newSkipSet(opts.SkipResourceTypes)
	}
	switch {
	case !p.cfg.ShouldAdmitHops:
		hops = nil // nothing is paused
	case hops == nil:
		hops = noHopAdmitter{}
	}
	out := p.render(rctx, u, adm, hops, skip, opts.Headers, start, start.Add(timeout), held)
	out.HealthSignal.ElapsedMs = p.clk.Now().Sub(start).Milliseconds()
	return out
}

// noHopAdmitter admits no hop: a render paused for hop admissions and given no admitter
// sends nothing after its first main document (SPEC §2), and answers self_rate_limited.
type noHopAdmitter struct{}

func (noHopAdmitter) AdmitHop(ctx context.Context, domain string) (limiter.Admission, error) {
	return limiter.Admission{}, fmt.Errorf("render: no hop admitter for %s: %w", domain, context.DeadlineExceeded)
}

// render runs one render; held: the caller holds a slot (AcquireSlot), else one is taken
// here for the render's duration.
func (p *Pool) render(ctx context.Context, u *url.URL, adm *limiter.Admission, hops HopAdmitter, skip skipSet, headers downloader.RequestHeaders, start, deadline time.Time, held bool) (out *downloader.Outcome) {
	if u == nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return downloader.FailedBy(downloader.CauseInvalidURL)
	}
	domain, err := downloader.CanonicalHost(u.Host)
	if err != nil {
		return downloader.FailedBy(downloader.CauseInvalidURL)
	}
	if !held {
		if err := p.gate.Acquire(ctx, limiter.QueueBounded); err != nil {
			if errors.Is(err, limiter.ErrQueueFull) {
				return downloader.FailedBy(downloader.CauseQueueFull)
			}
			return downloader.FailedBy(stopCause(ctx))
		}
		// The slot is given back when Render returns; the tab's cleanup goes on behind it.
		defer p.gate.Release()
	}
	if p.scale != nil {
		slotAt := p.clk.Now()
		defer func() { p.scale.observe(slotAt, out) }()
	}
	st := newRenderState(p.clk, domain, adm)
	st.caps = subrequestCaps{total: p.cfg.MaxSubrequestCount, perHost: p.cfg.MaxHostSubrequestCount}
	job := &renderJob{p: p, u: u, st: st, skip: skip, hops: hops, headers: headers, start: start, deadline: deadline, done: make(chan *downloader.Outcome, 1)}
	if !p.goTracked(func() { job.run(ctx) }) {
		return downloader.FailedBy(downloader.CauseCancelled)
	}
	select {
	case out = <-job.done:
		st.release()
		if p.ctx.Err() != nil && out.HTTPStatus == 0 && !out.FailReason.HasReachedOrigin() {
			// Closing the pool kills the browser under the render: that is our stop,
			// not a crash.
			out.Fail(downloader.CauseCancelled)
		}
		return out
	case <-ctx.Done():
		st.release()
		// The job may have finished at the same moment.
		select {
		case out = <-job.done:
			return out
		default:
		}
		return downloader.FailedBy(stopCause(ctx))
	}
}

// goTracked runs f on a goroutine that Close waits for, unless the pool is closed.
func (p *Pool) goTracked(f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Go(f)
	return true
}

// stopCause is the cause of a render whose context ended.
func stopCause(ctx context.Context) downloader.Cause {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errCrashed):
		return downloader.CauseRendererCrashed
	case errors.Is(cause, errRenderTimeout), errors.Is(cause, context.DeadlineExceeded):
		return downloader.CauseRenderTimeout
	default: // the caller cancelled, or the pool is closing
		return downloader.CauseCancelled
	}
}

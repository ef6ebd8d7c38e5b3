package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"downloader"
	"downloader/egress"
	"downloader/egressproxy"
	"downloader/netguard"
	"downloader/render"
)

// config is every flag of serve (and crawl, which runs the same service).
type config struct {
	Listen               string
	DataDir              string
	DefaultMinIntervalMs int64
	MaxConcurrentCount   int
	LocalQueueLength     int
	ConnectTo            []netguard.Rule
	AllowPrivateNetworks bool
	UserAgent            string
	// Request headers (SPEC §5): callers' request_headers are checked against the
	// allow-list (User-Agent only with ShouldAllowUserAgentHeader); DefaultRequestHeaderLines
	// ("Name: value", --default-request-header) go with every request of A, B and C.
	ShouldAllowUserAgentHeader bool
	DefaultRequestHeaderLines  []string
	defaultRequestHeaders      downloader.RequestHeaders // parsed by check
	RequestTimeoutMs           int64
	RenderConcurrency          int
	RenderIsolation            string
	RenderScaling              string
	// RenderMaxContextHeapBytes recycles a long-lived tab whose renderer's JS heap is
	// above it after a render (--render-isolation=wipe); negative: no bound.
	RenderMaxContextHeapBytes int64
	// RenderSpareTabCount: long-lived tabs beyond one per slot (--render-isolation=wipe).
	RenderSpareTabCount    int
	RendererEndpoint       string
	ChromiumPath           string
	LogLevel               slog.Level
	ShutdownGraceSeconds   int
	Lease                  leaseConfig   // entry A (lease.go)
	Cluster                clusterConfig // --store tikv (cluster.go)
	RendererKind           string
	RenderGuardProxyListen string
	// The guard proxy terminates TLS, its CA in --data-dir (docs/deploy.md).
	ShouldRenderGuardProxyTerminateTLS bool
	// Plain fetches offer HTTP/2 (ALPN h2, then http/1.1); false: HTTP/1.1 only.
	ShouldUseHTTP2 bool

	// The render's sub-request caps (SPEC §3), in total and per host other than the page's.
	RenderMaxSubrequestCount     int
	RenderMaxHostSubrequestCount int

	// Access: bearer tokens, and the switch that allows serving without
	// them on a non-loopback address.
	APIToken             string
	AdminToken           string
	MetricsToken         string // bearer token of GET /metrics; empty: open
	AllowUnauthenticated bool

	// Egress detection (package egress, docs/reliability.md).
	EgressCanary         string // HOST:PORT connected to as a canary; empty: none
	EgressWindowSeconds  int
	EgressMinDomainCount int

	// The operator's egress proxy (egressproxy.go): every connection to an origin goes
	// through it, behind the SSRF guard.
	EgressProxy                string
	EgressProxyCredentialsFile string
	egressProxyCredentials     egressproxy.Credentials // from the file or the environment; never logged
	egressProxyDialer          *egressproxy.Dialer     // nil: direct

	// The API server's read timeouts: not flags, shortened by tests.
	readHeaderTimeout time.Duration
	readTimeout       time.Duration

	// observeWire, when set (by crawl, for its politeness summary), is told the wire
	// moment of every request the limiter lets out (limiter.ObserveWire).
	observeWire func(domain string, interval time.Duration, at time.Time)
	// discovery, when set (by crawl --max-depth), follows the links of the local queue's
	// pages (discover.go).
	discovery *discovery
	// isStopping, when set (by crawl: its signal context), reports a stop in progress;
	// the service's own context otherwise.
	isStopping func() bool
}

const defaultUserAgent = "downloader/1.0 (+https://example.invalid/crawler)"

// connectToFlag collects repeatable --connect-to values.
type connectToFlag struct{ rules *[]netguard.Rule }

func (f connectToFlag) String() string { return "" }
func (f connectToFlag) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		r, err := netguard.ParseConnectTo(part)
		if err != nil {
			return err
		}
		*f.rules = append(*f.rules, r)
	}
	return nil
}

// linesFlag collects a repeatable flag's values.
type linesFlag struct{ lines *[]string }

func (f linesFlag) String() string { return "" }
func (f linesFlag) Set(s string) error {
	*f.lines = append(*f.lines, s)
	return nil
}

type levelFlag struct{ l *slog.Level }

func (f levelFlag) String() string {
	if f.l == nil {
		return "info"
	}
	return strings.ToLower(f.l.String())
}
func (f levelFlag) Set(s string) error { return f.l.UnmarshalText([]byte(s)) }

// newFlagSet declares the flags into c with their defaults.
func newFlagSet(name string, c *config, stderr io.Writer) *flag.FlagSet {
	c.readHeaderTimeout, c.readTimeout = defaultReadHeaderTimeout, defaultReadTimeout
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8080", "address to serve the API and console on")
	fs.StringVar(&c.DataDir, "data-dir", "data", "directory of the embedded store and settings")
	fs.Int64Var(&c.DefaultMinIntervalMs, "default-min-interval-ms", 1000, "interval for B and C requests that carry no min_interval_ms")
	fs.IntVar(&c.MaxConcurrentCount, "max-concurrent-count", 64, "requests in flight across the service (seeds a fresh data dir; the value changed online wins after a restart)")
	fs.IntVar(&c.LocalQueueLength, "local-queue-length", 256, "requests B and C may wait for a global slot before 429 / local_queue_full")
	fs.Var(connectToFlag{&c.ConnectTo}, "connect-to", "HOST1:PORT1:HOST2:PORT2: send requests for HOST1:PORT1 to HOST2:PORT2 (curl style; repeatable or comma-separated; a leading *. matches subdomains)")
	fs.BoolVar(&c.AllowPrivateNetworks, "allow-private-networks", false, "turn the SSRF guard off: allow loopback, private, link-local and metadata addresses")
	fs.StringVar(&c.UserAgent, "user-agent", defaultUserAgent, "User-Agent of every request, plain and rendered")
	fs.Var(linesFlag{&c.DefaultRequestHeaderLines}, "default-request-header", "'Name: value' sent with every request of A, B and C unless the request's request_headers name it (repeatable; the request_headers allow-list: Accept-Language, Cookie, Referer)")
	fs.BoolVar(&c.ShouldAllowUserAgentHeader, "should-allow-user-agent-header", false, "let request_headers (and --default-request-header) set User-Agent")
	fs.BoolVar(&c.ShouldUseHTTP2, "should-use-http2", true, "plain fetches (and robots.txt) offer HTTP/2 to https origins (ALPN h2, then http/1.1; each stream admitted as a request); false: HTTP/1.1 only")
	fs.Int64Var(&c.RequestTimeoutMs, "request-timeout-ms", 30000, "default timeout of one fetch or render")
	fs.IntVar(&c.RenderConcurrency, "render-concurrency", runtime.NumCPU(), "renders at once (the browser pool size)")
	fs.StringVar(&c.RenderIsolation, "render-isolation", "wipe", "how renders are kept apart: wipe (long-lived contexts, every touched origin's state wiped between renders, HTTP and code cache kept) or context (a new browser context per render)")
	fs.StringVar(&c.RenderScaling, "render-scaling", string(render.ScalingFixed), "how many of the --render-concurrency slots are used: fixed (all of them) or adaptive (between 1 and --render-concurrency, following render latency against the unloaded p50, and the host's CPU)")
	fs.IntVar(&c.RenderSpareTabCount, "render-spare-tab-count", 0, "with --render-isolation=wipe, long-lived tabs kept beyond one per slot, so that a render takes a clean tab while the last one is wiped (each costs an idle renderer's memory)")
	fs.Int64Var(&c.RenderMaxContextHeapBytes, "render-max-context-heap-bytes", render.DefaultMaxContextHeapBytes, "with --render-isolation=wipe, recycle a long-lived tab after a render that leaves its renderer's JavaScript heap above this; -1: no bound")
	fs.IntVar(&c.RenderMaxSubrequestCount, "render-max-subrequest-count", render.DefaultMaxSubrequestCount, "sub-requests one render may send (scripts, styles, XHR, fetch, beacons); the rest is refused and counted in capped_subrequest_count")
	fs.IntVar(&c.RenderMaxHostSubrequestCount, "render-max-host-subrequest-count", render.DefaultMaxHostSubrequestCount, "sub-requests one render may send to each host other than the page's own")
	fs.StringVar(&c.RendererEndpoint, "renderer-endpoint", "", "remote CDP endpoint (e.g. ws://obscura:9222/devtools/browser); empty launches local Chromium")
	fs.StringVar(&c.RendererKind, "renderer-kind", "auto", "the CDP server behind --renderer-endpoint: auto (told from its /json/version), chromium or obscura (docs/renderers.md)")
	fs.StringVar(&c.RenderGuardProxyListen, "render-guard-proxy-listen", "", "the `ADDR` (host:port) of the one guard proxy a remote renderer's requests must go through; start Obscura with 'serve --proxy http://ADDR' (default: a free port on 127.0.0.1, shown in the renderer stats)")
	fs.BoolVar(&c.ShouldRenderGuardProxyTerminateTLS, "should-render-guard-proxy-terminate-tls", false, "the guard proxy terminates TLS under a CA of ours, made once in --data-dir/render-guard-ca, so that it sees every request inside HTTPS (hops admitted, skipped types refused, caps per request); start Obscura with SSL_CERT_FILE=--data-dir/render-guard-ca/ca.pem (docs/deploy.md)")
	fs.StringVar(&c.ChromiumPath, "chromium-path", "/usr/lib/chromium/chromium-headless-shell", "local headless Chromium binary")
	fs.Var(levelFlag{&c.LogLevel}, "log-level", "debug, info, warn or error")
	fs.IntVar(&c.ShutdownGraceSeconds, "shutdown-grace-seconds", 20, "on SIGINT/SIGTERM, how long in-flight requests may finish")
	fs.StringVar(&c.APIToken, "api-token", "", "bearer token required by entries B and C, task submission and the read API (better given as DOWNLOADER_API_TOKEN)")
	fs.StringVar(&c.AdminToken, "admin-token", "", "bearer token required by settings and console actions; it opens the API too (better given as DOWNLOADER_ADMIN_TOKEN)")
	fs.StringVar(&c.MetricsToken, "metrics-token", "", "bearer token required by GET /metrics (Prometheus' authorization scrape setting); empty: /metrics is open (better given as DOWNLOADER_METRICS_TOKEN)")
	fs.BoolVar(&c.AllowUnauthenticated, "allow-unauthenticated", false, "serve on a non-loopback --listen address without --api-token and --admin-token")
	fs.StringVar(&c.EgressCanary, "egress-canary", "", "HOST:PORT of a target that should always accept a TCP connection: it confirms or vetoes an egress outage (docs/reliability.md); empty: none")
	fs.IntVar(&c.EgressWindowSeconds, "egress-window-seconds", int(egress.DefaultWindow/time.Second), "how long an outcome counts for its domain in the egress detector")
	fs.StringVar(&c.EgressProxy, "egress-proxy", "", "http://HOST:PORT (HTTP CONNECT) or socks5://HOST:PORT: send every connection to an origin through this proxy, the SSRF guard still deciding on the target's address (docs/egress-proxy.md); empty: direct")
	fs.StringVar(&c.EgressProxyCredentialsFile, "egress-proxy-credentials-file", "", "file holding the egress proxy's username:password (else DOWNLOADER_EGRESS_PROXY_CREDENTIALS; never in the URL)")
	addClusterFlags(fs, &c.Cluster)
	fs.IntVar(&c.EgressMinDomainCount, "egress-min-domain-count", egress.DefaultMinDomainCount, "distinct domains failing at network level (and at least 80% of the domains seen) before failures are reported as egress_unavailable")
	addLeaseFlags(fs, &c.Lease)
	return fs
}

// The API server's read timeouts: a caller that sends its headers or its body too slowly
// (slowloris) is cut off, so that it cannot hold a connection and a goroutine for ever.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	defaultReadTimeout       = 30 * time.Second
)

// egressCanary returns the canary of --egress-canary: a TCP connect to HOST:PORT, made
// without the SSRF guard (the operator's choice, like the scheduler), through the egress
// proxy when there is one (it checks the path our requests take); nil without one.
// It is the one connection the service makes outside the engine's pipeline, on purpose:
// a probe of our own network, not a request to a crawled site (no HTTP request is sent,
// the host is the operator's, not a domain the limiter guards, SPEC §2), and it must not
// wait behind the global cap or a domain's interval that it is there to judge.
func (c *config) egressCanary() func(ctx context.Context) error {
	if c.EgressCanary == "" {
		return nil
	}
	addr := c.EgressCanary
	return func(ctx context.Context) error {
		conn, err := c.canaryDialer().DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("egress canary %s: %w", addr, err)
		}
		return conn.Close()
	}
}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return "DOWNLOADER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args, then fills every flag not given on the command line from its
// environment variable, then checks the values.
func parseFlags(fs *flag.FlagSet, c *config, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || envErr != nil {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return envErr
	}
	if err := c.loadEgressProxy(getenv); err != nil {
		return err
	}
	return c.check()
}

func (c *config) check() error {
	switch {
	case c.DefaultMinIntervalMs < 0 || c.DefaultMinIntervalMs > downloader.MaxMinInterval.Milliseconds():
		return fmt.Errorf("--default-min-interval-ms must be between 0 and %d", downloader.MaxMinInterval.Milliseconds())
	case c.MaxConcurrentCount < 1:
		return errors.New("--max-concurrent-count must be at least 1")
	case c.LocalQueueLength < 0:
		return errors.New("--local-queue-length must not be negative")
	case c.RequestTimeoutMs < 1:
		return errors.New("--request-timeout-ms must be at least 1")
	case c.RenderConcurrency < 1:
		return errors.New("--render-concurrency must be at least 1")
	case c.RenderIsolation != string(render.IsolationWipe) && c.RenderIsolation != string(render.IsolationContext):
		return errors.New("--render-isolation must be wipe or context")
	case c.RenderScaling != string(render.ScalingAdaptive) && c.RenderScaling != string(render.ScalingFixed):
		return errors.New("--render-scaling must be adaptive or fixed")
	case c.RenderSpareTabCount < 0:
		return errors.New("--render-spare-tab-count must not be negative")
	case c.RenderMaxContextHeapBytes == 0:
		return errors.New("--render-max-context-heap-bytes must not be 0 (-1: no bound)")
	case !isRendererKind(c.RendererKind):
		return errors.New("--renderer-kind must be auto, chromium or obscura")
	case c.RenderMaxSubrequestCount < 1:
		return errors.New("--render-max-subrequest-count must be at least 1")
	case c.RenderMaxHostSubrequestCount < 1:
		return errors.New("--render-max-host-subrequest-count must be at least 1")
	case c.ShutdownGraceSeconds < 0:
		return errors.New("--shutdown-grace-seconds must not be negative")
	case c.DataDir == "":
		return errors.New("--data-dir is required")
	case c.EgressWindowSeconds < 1:
		return errors.New("--egress-window-seconds must be at least 1")
	case c.EgressMinDomainCount < 1:
		return errors.New("--egress-min-domain-count must be at least 1")
	case c.Lease.MaxAttemptCount < 1:
		return errors.New("--max-attempt-count must be at least 1")
	}
	if err := c.Cluster.check(); err != nil {
		return err
	}
	c.defaultRequestHeaders = nil
	for _, line := range c.DefaultRequestHeaderLines {
		name, value, err := c.headerPolicy().ParseHeaderLine("--default-request-header", line)
		if err != nil {
			return errors.New(downloader.ErrorMessage(err))
		}
		if c.defaultRequestHeaders == nil {
			c.defaultRequestHeaders = downloader.RequestHeaders{}
		}
		c.defaultRequestHeaders[name] = value
	}
	if c.EgressCanary != "" {
		if _, _, err := net.SplitHostPort(c.EgressCanary); err != nil {
			return fmt.Errorf("--egress-canary %q: want HOST:PORT", c.EgressCanary)
		}
	}
	return c.checkAccess()
}

// headerPolicy is the request_headers policy of the service.
func (c *config) headerPolicy() downloader.HeaderPolicy {
	return downloader.HeaderPolicy{ShouldAllowUserAgent: c.ShouldAllowUserAgentHeader}
}

// checkAccess is the access rule: without both tokens the service serves loopback
// only, unless the operator says --allow-unauthenticated. Both are needed because each
// token alone leaves the other side open (the API token does not guard settings; without
// it entries B and C, which make requests to any host on our behalf, are open).
func (c *config) checkAccess() error {
	if c.APIToken != strings.TrimSpace(c.APIToken) || c.AdminToken != strings.TrimSpace(c.AdminToken) ||
		c.MetricsToken != strings.TrimSpace(c.MetricsToken) {
		return errors.New("--api-token, --admin-token and --metrics-token must not begin or end with white space")
	}
	if c.AllowUnauthenticated || isLoopbackListen(c.Listen) {
		return nil
	}
	var missing []string
	if c.APIToken == "" {
		missing = append(missing, "--api-token")
	}
	if c.AdminToken == "" {
		missing = append(missing, "--admin-token")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("--listen %s is not a loopback address, and without %s anyone who reaches it may use it: set --api-token and --admin-token (or DOWNLOADER_API_TOKEN and DOWNLOADER_ADMIN_TOKEN), or pass --allow-unauthenticated",
		c.Listen, strings.Join(missing, " and "))
}

// isLoopbackListen reports whether a --listen address only accepts connections from this
// machine: a loopback IP literal or "localhost". An empty host means every interface.
func isLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func (c *config) requestTimeout() time.Duration {
	return time.Duration(c.RequestTimeoutMs) * time.Millisecond
}

func isRendererKind(s string) bool {
	_, err := render.ParseRendererKind(s)
	return err == nil
}

// rendererKind is --renderer-kind, already checked by validate.
func rendererKind(s string) render.RendererKind {
	k, _ := render.ParseRendererKind(s)
	return k
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	oklogrun "github.com/oklog/run"

	"downloader"
	"downloader/clock"
	"downloader/console"
	"downloader/egress"
	"downloader/engine"
	"downloader/fetch"
	"downloader/limiter"
	"downloader/metrics"
	"downloader/netguard"
	"downloader/render"
	"downloader/server"
	"downloader/store/embedded"
)

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	fs := newFlagSet("serve", &c, stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: downloader serve [flags]\n\nRuns the service on embedded defaults. Flags (each also DOWNLOADER_<FLAG>):\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, &c, args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	logger := newLogger(stderr, c.LogLevel)
	svc, err := startService(ctx, &c, logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "downloader: listening on http://%s\ndownloader: console on http://%s/\n", svc.addr, svc.addr)
	return svc.wait(ctx)
}

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// service is the running downloader: every component and the order to stop them in.
type service struct {
	cfg     *config
	log     *slog.Logger
	addr    net.Addr
	store   *embedded.Store
	limiter *limiter.Limiter
	engine  *engine.Engine
	fetcher *fetch.Fetcher
	render  *render.Pool
	server  *server.Server
	entryA  *entryA  // the lease loop (lease.go)
	cluster *cluster // --store tikv (cluster.go); nil on one machine
	egress  *egress.Detector
	http    *http.Server
	ln      net.Listener
}

// startService opens the store, builds every component and opens the listener; nothing
// runs yet. The caller must call wait, which runs and then stops them.
func startService(ctx context.Context, c *config, logger *slog.Logger) (*service, error) {
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	st, err := embedded.Open(filepath.Join(c.DataDir, "store"), logger)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	clk := clock.Real{}
	lim := limiter.New(clk)
	// Before anything else touches the store: whether it is empty tells a fresh data dir.
	if err := restoreRuntime(ctx, st, lim, clk, c.Cluster.Store == storeTiKV, logger); err != nil {
		st.Close()
		return nil, err
	}
	gate := limiter.NewGate(c.MaxConcurrentCount, c.LocalQueueLength)
	// Cluster mode (cluster.go): results, pages, settings and the limiter state in TiKV.
	results, pages, settings := downloader.ResultStore(st), downloader.PageStore(st), downloader.SettingsStore(st)
	var cl *cluster
	var shared downloader.SharedRuntime
	if c.Cluster.Store == storeTiKV {
		if cl, err = openCluster(c, logger, clk, gate); err != nil {
			st.Close()
			return nil, err
		}
		results, pages, settings, shared = cl.store, cl.store, cl.store, cl.runtime
	}
	closeStores := func() {
		if cl != nil {
			_ = cl.close()
		}
		st.Close()
	}
	if c.observeWire != nil {
		lim.ObserveWire(c.observeWire)
	}
	guard := netguard.New(netguard.Config{ConnectTo: c.ConnectTo, AllowPrivateNetworks: c.AllowPrivateNetworks, Dialer: c.egressDialer()})
	defaultInterval := time.Duration(c.DefaultMinIntervalMs) * time.Millisecond
	// Every request's redirect hops are admitted by the hop admitter the engine builds for
	// it and passes with the call (engine.Hops); the renderer's ShouldAdmitHops turns on the
	// document pausing those admissions need.
	fetcher := fetch.New(fetch.Config{Clock: clk, Guard: guard, Logger: logger, UserAgent: c.UserAgent, DisableHTTP2: !c.ShouldUseHTTP2})
	isStopping := c.isStopping
	if isStopping == nil {
		isStopping = func() bool { return ctx.Err() != nil }
	}
	pool, err := render.New(render.Config{
		IsStopping: isStopping, Clock: clk, Logger: logger, BinaryPath: c.ChromiumPath, Endpoint: c.RendererEndpoint,
		Concurrency: c.RenderConcurrency, QueueLength: c.LocalQueueLength, UserAgent: c.UserAgent,
		Isolation: render.Isolation(c.RenderIsolation),
		Scaling:   render.Scaling(c.RenderScaling), MaxContextHeapBytes: c.RenderMaxContextHeapBytes,
		SpareTabCount: c.RenderSpareTabCount,
		Kind:          rendererKind(c.RendererKind), GuardProxyListen: c.RenderGuardProxyListen, GuardProxyCADir: c.guardProxyCADir(),
		MaxSubrequestCount: c.RenderMaxSubrequestCount, MaxHostSubrequestCount: c.RenderMaxHostSubrequestCount,
		Guard: guard, DefaultTimeout: c.requestTimeout(), ShouldAdmitHops: true,
	})
	if err != nil {
		closeStores()
		return nil, fmt.Errorf("renderer: %w", err)
	}
	det := egress.New(egress.Config{Clock: clk, Logger: logger, Canary: c.egressCanary(),
		Window: time.Duration(c.EgressWindowSeconds) * time.Second, MinDomainCount: c.EgressMinDomainCount})
	live := metrics.Sources{Egress: func() downloader.EgressState { return det.Status(clk.Now()).EgressState() },
		Fence: func() downloader.FenceState { return downloader.FenceState{} }} // one machine is never fenced
	if shared != nil {
		live.MaxConcurrentCount = shared.MaxConcurrentCount // the cluster's; the gate holds this instance's share
	}
	if f, ok := shared.(downloader.Fencer); ok {
		live.Fence = func() downloader.FenceState { return f.FenceState(clk.Now()) }
	}
	obs, err := newObservability(clk, logger, lim, gate, pool, live)
	if err != nil {
		pool.Close()
		closeStores()
		return nil, err
	}
	eng := engine.New(engine.Config{
		Clock: clk, Logger: logger, Limiter: lim, Gate: gate, Fetcher: fetcher, Renderer: pool,
		Results: results, Pages: pages, Settings: settings, Observer: obs.observer, Egress: det, DefaultMinInterval: defaultInterval,
		DefaultTimeout: c.requestTimeout(), Shared: shared,
		HeaderPolicy: c.headerPolicy(), DefaultRequestHeaders: c.defaultRequestHeaders,
	})
	if err := eng.LoadSettings(ctx); err != nil {
		pool.Close()
		closeStores()
		return nil, err
	}
	if cl != nil {
		if err := cl.start(ctx); err != nil {
			pool.Close()
			closeStores()
			return nil, err
		}
	}
	a, err := newEntryA(ctx, c, logger, clk, st, taskStores{pages: pages, results: results}, eng, gate, guard)
	if err != nil {
		pool.Close()
		closeStores()
		return nil, err
	}
	if a.queue != nil {
		obs.queue.Store(a.queue)
	}
	// What the HTTP layer and the console read: the engine runs the entries and owns the
	// settings; the limiter, the gate, the cluster runtime and the egress detector are
	// shown as they are (server.Config, console.Config).
	var clusterView server.ClusterView // nil on the embedded store
	if cl != nil {
		clusterView = cl.runtime
	}
	egressOf := func(now time.Time) (downloader.EgressState, bool) { return det.Status(now).EgressState(), true }
	extra, err := obs.routes(console.Config{Settings: eng, Limiter: lim, Gate: gate, Cluster: clusterView, Egress: egressOf}) // the console and /metrics
	if err != nil {
		a.close()
		pool.Close()
		closeStores()
		return nil, err
	}
	srv := server.New(server.Config{Probe: eng, Render: eng, Settings: eng, Domains: lim, Slots: gate,
		Cluster: clusterView, Egress: egressOf, Guard: guard, HeaderPolicy: c.headerPolicy(), Logger: logger, Clock: clk, Extra: extra,
		Tasks: a.taskQueue(), Results: results, Pages: pages, APIToken: c.APIToken, AdminToken: c.AdminToken,
		MetricsToken: c.MetricsToken, StartedAt: clk.Now()})
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		a.close()
		pool.Close()
		closeStores()
		return nil, fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	srv.SetAddress(announcedAddress(ln.Addr().String())) // the port --listen :0 got
	if cl != nil {
		cl.runtime.SetAddress(announcedAddress(ln.Addr().String()))
	}
	s := &service{cfg: c, log: logger, addr: ln.Addr(), store: st, limiter: lim, engine: eng, fetcher: fetcher,
		render: pool, server: srv, entryA: a, cluster: cl, egress: det, ln: ln,
		http: &http.Server{
			Handler:           srv,
			ReadHeaderTimeout: c.readHeaderTimeout,
			ReadTimeout:       c.readTimeout,
			WriteTimeout:      c.requestTimeout() + maxQueueWait + 10*time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}}
	logger.Info("service started", "listen", ln.Addr().String(), "data_dir", c.DataDir, "store_backend", c.Cluster.Store,
		"max_concurrent_count", eng.Settings().MaxConcurrentCount,
		"has_api_token", c.APIToken != "", "has_admin_token", c.AdminToken != "")
	if c.AllowUnauthenticated && !isLoopbackListen(c.Listen) && (c.APIToken == "" || c.AdminToken == "") {
		logger.Warn("serving a non-loopback address without authentication (--allow-unauthenticated)", "listen", c.Listen)
	}
	return s, nil
}

// maxQueueWait bounds how long a B or C request may wait for a global slot in practice
// (the HTTP write timeout must cover it).
const maxQueueWait = time.Minute

// wait runs the service's long-running parts as the actors of one run group until ctx
// ends or one of them fails, then stops everything. The group interrupts its actors one
// after the other in the order they are added below, and each interrupt returns only once
// its part has stopped, so that order is the shutdown order, written once:
//
//  1. the stop signal: ctx's end (SIGINT, SIGTERM) or the first part to fail;
//  2. the drain: entry A stops leasing and the server drains (the listener stays open,
//     /readyz answers 503, new B and C requests are answered shutting_down); entry A's
//     held tasks and the B and C requests in flight get the grace period to finish; what
//     is left then is cut short: the engine stops (shutting_down; entry A's tasks come
//     back as releases);
//  3. the HTTP listener closes;
//  4. entry A's lease loop ends, once it has released what came back and flushed its
//     reports;
//  5. the engine stops for good;
//  6. the background parts the requests needed until now: the limiter's sweep, the
//     heartbeat, the cluster runtime (which writes back the last requests and leaves),
//     the egress canary.
//
// Then the cluster store, the renderer and the fetcher close; then, on the embedded
// store, the limiter's entries are saved for the next start (nothing is sent any more);
// then the store closes.
func (s *service) wait(ctx context.Context) error {
	var g oklogrun.Group
	// 1. The stop signal.
	signalCtx, stopSignal := context.WithCancel(ctx)
	defer stopSignal()
	g.Add(func() error {
		<-signalCtx.Done()
		return nil
	}, func(error) { stopSignal() })
	// 2. The drain. Its actor only waits: its interrupt is the graceful stop of A, B and C.
	drainCtx, endDrain := context.WithCancel(context.Background())
	g.Add(func() error {
		<-drainCtx.Done()
		return nil
	}, func(error) {
		s.drain()
		endDrain()
	})
	// 3. The HTTP listener.
	g.Add(func() error {
		if err := s.http.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	}, func(error) {
		hard, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.http.Shutdown(hard); err != nil {
			s.http.Close()
		}
	})
	// 4. Entry A's lease loop.
	leaseCtx, stopLeasing := context.WithCancel(context.Background())
	s.entryA.stopLeasing = stopLeasing
	leaseDone := make(chan struct{})
	s.entryA.done = leaseDone
	g.Add(func() error {
		defer close(leaseDone)
		s.entryA.run(leaseCtx)
		return nil
	}, func(error) {
		stopLeasing()
		<-leaseDone
		s.entryA.close()
	})
	// 5. The engine.
	engineDone := make(chan struct{})
	g.Add(func() error {
		<-engineDone
		return nil
	}, func(error) {
		s.engine.Stop()
		close(engineDone)
	})
	// 6. The background parts.
	runCtx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	g.Add(func() error {
		if err := s.limiter.Run(runCtx); runCtx.Err() == nil {
			return fmt.Errorf("limiter: %w", err)
		}
		return nil
	}, func(error) { stopBackground() })
	g.Add(func() error {
		runHeartbeat(runCtx, s.store, s.limiter.Clock(), s.log)
		return nil
	}, func(error) { stopBackground() })
	if s.cluster != nil {
		g.Add(func() error {
			s.cluster.run(runCtx) // heartbeats and write-backs, then it leaves the cluster
			<-runCtx.Done()
			return nil
		}, func(error) { stopBackground() })
	}
	g.Add(func() error {
		_ = s.egress.Run(runCtx) // the canary, if any
		<-runCtx.Done()
		return nil
	}, func(error) { stopBackground() })

	s.server.SetReady(true)
	runErr := g.Run()
	if s.cluster != nil {
		if err := s.cluster.close(); err != nil && runErr == nil {
			runErr = err
		}
	}
	s.render.Close()
	s.fetcher.Close()
	if s.cluster == nil {
		// Nothing is sent any more: what the limiter holds now is the last word.
		saveRuntime(context.Background(), s.store, s.limiter, s.limiter.Clock(), s.log)
	}
	if err := s.store.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("close store: %w", err)
	}
	s.log.Info("stopped")
	return runErr
}

// drain is step 2 of wait's shutdown order: entry A stops leasing and the server drains,
// both within the grace period; whatever is left when it is over is cut short by stopping
// entry A's runner and the engine.
func (s *service) drain() {
	graceDuration := time.Duration(s.cfg.ShutdownGraceSeconds) * time.Second
	s.log.Info("stopping", "shutdown_grace_seconds", s.cfg.ShutdownGraceSeconds)
	grace, cancel := context.WithTimeout(context.Background(), graceDuration)
	defer cancel()
	// Entry A stops leasing now and gives its held tasks the same grace period.
	leaseDone := s.entryA.stop()
	drained := s.server.Drain(grace, s.limiter.Clock().Now().Add(graceDuration)) == nil
	select {
	case <-leaseDone:
	case <-grace.Done():
	}
	if !drained || grace.Err() != nil {
		// Grace is over: cut what is left short (answered shutting_down; entry A's tasks
		// come back as releases).
		s.entryA.stopTasks()
		s.engine.Stop()
	}
}

// guardProxyCADir is where the guard proxy's CA lives, empty when it does not terminate TLS.
func (c *config) guardProxyCADir() string {
	if !c.ShouldRenderGuardProxyTerminateTLS {
		return ""
	}
	return filepath.Join(c.DataDir, "render-guard-ca")
}

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

	"downloader"
	"downloader/clock"
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
	http    *http.Server
	errc    chan error // the first error of a long-running part
	cancel  context.CancelFunc
	// heartbeatDone is closed when the heartbeat (runtime.go) has stopped.
	heartbeatDone chan struct{}
}

// startService opens the store, builds every component and starts serving. The caller
// must call wait.
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
	var shared engine.SharedRuntime
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
	guard := netguard.New(netguard.Config{ConnectTo: c.ConnectTo, AllowPrivateNetworks: c.AllowPrivateNetworks})
	defaultInterval := time.Duration(c.DefaultMinIntervalMs) * time.Millisecond
	fetcher := fetch.New(fetch.Config{
		Clock: clk, Guard: guard, Logger: logger, UserAgent: c.UserAgent,
		Hops: engine.Hops{Limiter: lim, DefaultMinInterval: defaultInterval, Shared: shared, DefaultTimeout: c.requestTimeout()},
	})
	pool, err := render.New(render.Config{
		Clock: clk, Logger: logger, BinaryPath: c.ChromiumPath, Endpoint: c.RendererEndpoint,
		Concurrency: c.RenderConcurrency, QueueLength: c.LocalQueueLength, UserAgent: c.UserAgent,
		Isolation:          render.Isolation(c.RenderIsolation),
		MaxSubrequestCount: c.RenderMaxSubrequestCount, MaxHostSubrequestCount: c.RenderMaxHostSubrequestCount,
		Guard: guard, DefaultTimeout: c.requestTimeout(), Hops: engine.Hops{Limiter: lim, DefaultMinInterval: defaultInterval, Shared: shared, DefaultTimeout: c.requestTimeout()},
	})
	if err != nil {
		closeStores()
		return nil, fmt.Errorf("renderer: %w", err)
	}
	det := egress.New(egress.Config{Clock: clk, Logger: logger, Canary: c.egressCanary(),
		Window: time.Duration(c.EgressWindowSeconds) * time.Second, MinDomainCount: c.EgressMinDomainCount})
	live := metrics.Sources{Egress: func() engine.EgressState { return engine.EgressStateOf(det.Status(clk.Now())) }}
	if shared != nil {
		live.MaxConcurrentCount = shared.MaxConcurrentCount // the cluster's; the gate holds this instance's share
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
	a, err := newEntryA(ctx, c, logger, clk, st, eng, gate, fetcher)
	if err != nil {
		pool.Close()
		closeStores()
		return nil, err
	}
	extra, err := obs.routes(eng) // the console and /metrics
	if err != nil {
		a.close()
		pool.Close()
		closeStores()
		return nil, err
	}
	srv := server.New(server.Config{Engine: eng, Guard: guard, Logger: logger, Clock: clk, Extra: extra,
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
	runCtx, cancel := context.WithCancel(context.Background())
	s := &service{cfg: c, log: logger, addr: ln.Addr(), store: st, limiter: lim, engine: eng, fetcher: fetcher,
		render: pool, server: srv, entryA: a, cluster: cl, errc: make(chan error, 2), cancel: cancel, heartbeatDone: make(chan struct{}),
		http: &http.Server{
			Handler:           srv,
			ReadHeaderTimeout: c.readHeaderTimeout,
			ReadTimeout:       c.readTimeout,
			WriteTimeout:      c.requestTimeout() + maxQueueWait + 10*time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}}
	go func() { s.errc <- lim.Run(runCtx) }()
	go func() {
		defer close(s.heartbeatDone)
		runHeartbeat(runCtx, st, clk, logger)
	}()
	if cl != nil {
		cl.run(runCtx) // heartbeats and write-backs; wait ends it after the engine
	}
	go func() { _ = det.Run(runCtx) }() // the canary, if any; it ends with runCtx
	go func() {
		if err := s.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.errc <- fmt.Errorf("serve http: %w", err)
		}
	}()
	a.start()
	srv.SetReady(true)
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

// wait runs until ctx ends or a part fails, then stops in order: drain (the listener
// stays open, /readyz answers 503, new B and C requests are answered shutting_down, the
// ones in flight and entry A's held tasks get the grace period to finish), cut what is
// left short with shutting_down, close the listener, then the renderer and the fetcher;
// then save the limiter's entries for the next start and close the store.
func (s *service) wait(ctx context.Context) error {
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-s.errc:
	}
	graceDuration := time.Duration(s.cfg.ShutdownGraceSeconds) * time.Second
	s.log.Info("stopping", "shutdown_grace_seconds", s.cfg.ShutdownGraceSeconds)
	grace, cancel := context.WithTimeout(context.Background(), graceDuration)
	defer cancel()
	// Entry A stops leasing now and gives its held tasks the same grace period, then
	// releases the rest and flushes its reports.
	leaseDone := s.entryA.stop()
	drained := s.server.Drain(grace, s.limiter.Clock().Now().Add(graceDuration)) == nil
	select {
	case <-leaseDone:
	case <-grace.Done():
	}
	if !drained || grace.Err() != nil {
		// Grace is over: cut what is left short (answered shutting_down).
		s.engine.Stop()
	}
	hard, cancelHard := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelHard()
	if err := s.http.Shutdown(hard); err != nil {
		s.http.Close()
	}
	<-leaseDone
	s.entryA.close()
	s.engine.Stop()
	s.cancel()
	if s.cluster != nil {
		// After the engine: the runtime writes back the last requests, then leaves.
		if err := s.cluster.close(); err != nil && runErr == nil {
			runErr = err
		}
	}
	s.render.Close()
	s.fetcher.Close()
	<-s.heartbeatDone
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

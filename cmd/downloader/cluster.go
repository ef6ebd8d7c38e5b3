package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"downloader/clock"
	"downloader/limiter"
	tikvstore "downloader/store/tikv"
)

// The values of --store.
const (
	storeEmbedded = "embedded"
	storeTiKV     = "tikv"
)

// clusterConfig is cluster mode (docs/deploy.md): --store tikv puts fetch_result, the
// page store, the settings and downloader:domain_runtime in TiKV, shared by every
// instance on the cluster. The local task queue and the report outbox of entry A stay in
// the data dir.
type clusterConfig struct {
	Store          string
	PDEndpoints    []string
	InstanceID     string
	MaxClockSkewMs int64
	// GCLifeTimeSeconds: see tikvstore.RuntimeConfig.GCLifeTime; 0 turns the runtime's GC off.
	GCLifeTimeSeconds int64

	// openTiKV opens the TiKV store; tests put the mock cluster here. nil: tikvstore.Open.
	openTiKV func(pdEndpoints []string, o tikvstore.Options) (*tikvstore.Store, error)
	// runtime overrides parts of the runtime's configuration (tests: faster heartbeats).
	runtime tikvstore.RuntimeConfig
}

// endpointsFlag parses a comma-separated list of host:port.
type endpointsFlag struct{ list *[]string }

func (f endpointsFlag) String() string {
	if f.list == nil {
		return ""
	}
	return strings.Join(*f.list, ",")
}

func (f endpointsFlag) Set(s string) error {
	*f.list = (*f.list)[:0]
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*f.list = append(*f.list, part)
		}
	}
	return nil
}

func addClusterFlags(fs *flag.FlagSet, c *clusterConfig) {
	fs.StringVar(&c.Store, "store", storeEmbedded, "where fetch_result, pages, settings and the limiter state live: embedded (one machine, in --data-dir) or tikv (cluster mode, shared by every instance; see --pd-endpoints)")
	fs.Var(endpointsFlag{&c.PDEndpoints}, "pd-endpoints", "with --store tikv: the TiKV cluster's PD endpoints, host:port[,host:port...]")
	fs.StringVar(&c.InstanceID, "instance-id", "", "with --store tikv: this instance's name in the cluster (default: random at each start); a process started with the id of a live one is refused, a restarted one waits for its predecessor's heartbeat to expire")
	fs.Int64Var(&c.GCLifeTimeSeconds, "tikv-gc-life-time-seconds", 600, "with --store tikv: the oldest instance advances TiKV's GC safe point to now minus this every 10 minutes; 0 when the cluster has its own GC worker (TiDB)")
	fs.Int64Var(&c.MaxClockSkewMs, "max-clock-skew-ms", tikvstore.DefaultMaxClockSkew.Milliseconds(), "with --store tikv: the most the instances' clocks may differ (NTP) plus the largest difference in one-way latency to an origin between instances; added to a domain's interval when its last request came from another instance; an instance whose clock is off PD's by more than half of it stops admitting")
}

func (c *clusterConfig) check() error {
	switch c.Store {
	case storeEmbedded:
		return nil
	case storeTiKV:
	default:
		return fmt.Errorf("--store %q: want %s or %s", c.Store, storeEmbedded, storeTiKV)
	}
	switch {
	case len(c.PDEndpoints) == 0 && c.openTiKV == nil:
		return errors.New("--store tikv needs --pd-endpoints host:port[,host:port...]")
	case c.MaxClockSkewMs < 0 || c.MaxClockSkewMs > 10_000:
		return errors.New("--max-clock-skew-ms must be between 0 and 10000")
	case c.GCLifeTimeSeconds != 0 && c.GCLifeTimeSeconds < 60:
		return errors.New("--tikv-gc-life-time-seconds must be 0 (off) or at least 60")
	}
	for _, ep := range c.PDEndpoints {
		if i := strings.LastIndexByte(ep, ':'); i <= 0 || i == len(ep)-1 {
			return fmt.Errorf("--pd-endpoints %q: want host:port", ep)
		}
	}
	return nil
}

// cluster is the TiKV side of cluster mode: the shared store and the shared runtime.
type cluster struct {
	store   *tikvstore.Store
	runtime *tikvstore.Runtime
	done    chan struct{} // closed when the runtime's Run returned; nil before run
}

// openCluster connects to TiKV and builds this instance's runtime over gate. It does not
// register the instance yet (start does).
func openCluster(c *config, logger *slog.Logger, clk clock.Clock, gate *limiter.Gate) (*cluster, error) {
	open := c.Cluster.openTiKV
	if open == nil {
		open = tikvstore.Open
	}
	st, err := open(c.Cluster.PDEndpoints, tikvstore.Options{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("open the TiKV store: %w", err)
	}
	rc := c.Cluster.runtime
	rc.InstanceID, rc.Clock, rc.Logger, rc.Gate = c.Cluster.InstanceID, clk, logger, gate
	rc.MaxConcurrentCount = c.MaxConcurrentCount
	rc.MaxClockSkew = time.Duration(c.Cluster.MaxClockSkewMs) * time.Millisecond
	if rc.MaxClockSkew == 0 {
		rc.MaxClockSkew = time.Nanosecond // 0 would mean the default: the flag says none
	}
	rc.DefaultTimeout = c.requestTimeout()
	rc.Address = announcedAddress(c.Listen)
	rc.GCLifeTime = time.Duration(c.Cluster.GCLifeTimeSeconds) * time.Second
	rt, err := tikvstore.NewRuntime(st, rc)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return &cluster{store: st, runtime: rt}, nil
}

// start registers this instance and returns once its share of the cap applies.
func (cl *cluster) start(ctx context.Context) error {
	if err := cl.runtime.Start(ctx); err != nil {
		return fmt.Errorf("join the cluster: %w", err)
	}
	return nil
}

// run runs the runtime (heartbeats, write-backs) until ctx ends and it has left; its
// errors are the runtime's to log.
func (cl *cluster) run(ctx context.Context) {
	cl.done = make(chan struct{})
	defer close(cl.done)
	_ = cl.runtime.Run(ctx)
}

// close waits for the runtime to write back and leave (its ctx must have ended), then
// closes the store.
func (cl *cluster) close() error {
	if cl.done != nil {
		<-cl.done
	}
	if err := cl.store.Close(); err != nil {
		return fmt.Errorf("close the TiKV store: %w", err)
	}
	return nil
}

// announcedAddress is the address the instance list shows for --listen: the listen address
// itself, or the host name with its port when it listens on every interface.
func announcedAddress(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return listen
	}
	name, err := os.Hostname()
	if err != nil {
		return listen
	}
	return net.JoinHostPort(name, port)
}

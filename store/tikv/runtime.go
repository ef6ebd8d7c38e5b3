package tikv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"downloader"
	"downloader/clock"
)

// The runtime is four parts over one Store, each in its own file, sharing the state the
// Runtime struct names:
//
//   - table.go: the keys of downloader:domain_runtime, its records, and the per-domain view;
//   - admission.go: the admission rule, Admit and its group transactions, and the ticket;
//   - writeback.go: the tickets' write-backs (Wired, Done), batched off the request path;
//   - membership.go (with skew.go): heartbeats, the cap's shares, incarnations, self-fencing;
//   - sweep.go: deleting records that can refuse nothing, and TiKV's GC.
//
// Run (below) is the one loop that drives the heartbeat, the sweep and the writer.

// Runtime is downloader:domain_runtime shared by every downloader instance on one TiKV
// cluster (downloader.SharedRuntime), with the instances' heartbeats and the cluster-wide
// max_concurrent_count. Create it with NewRuntime, call Start, then Run until the service
// stops. Safe for concurrent use.
//
// The keys are in table.go, the admission rule in admission.go, the cap and self-fencing
// in membership.go.
//
// # Time across machines
//
// Instants are the instances' own clocks (UTC wall time, NTP-disciplined), compared with
// the skew allowance added whenever the instant came from another process (another
// instance, or an earlier incarnation of this one), so two instances' requests are at least
// I apart at the origin as long as their clocks differ by less than the allowance. PD's TSO
// would give one clock, but the wire moment is taken on the local clock, and converting it
// costs a round trip per request; the heartbeat bounds the local clock's offset from the
// TSO instead, and the instance stops admitting while it cannot keep it within half the
// allowance (membership.go).
//
// # The cap across machines, incarnations, self-fencing
//
// max_concurrent_count is one cluster-wide setting (Store.Settings). Each instance's gate
// gets an even share of it over the live instances, within what the others' claims leave;
// the heartbeat is a lease past which the instance admits nothing; every process is an
// incarnation of its instance id. membership.go has the rules and the timing argument.
type Runtime struct {
	// Set at construction, read by every part.
	s   *Store
	cfg RuntimeConfig
	clk clock.Clock
	log *slog.Logger
	id  string

	// Shared between the parts: written by membership (the heartbeat), read by admission,
	// the write-backs and the sweep without a lock.
	//
	// inc is this process's incarnation (membership.go): a PD timestamp taken at its first
	// heartbeat, unique in the cluster; 0 before. Entries are this process's only when
	// both the instance id and the incarnation match (isMine).
	inc atomic.Uint64
	// skewNs is the clock skew allowance in force: the largest of the live instances'.
	skewNs atomic.Int64

	admissionState // admission.go: admission ids, per-domain stripes, the batch queue
	writeBackState // writeback.go: the write-back queue

	// refNow reads the reference clock the local one is checked against (PD's TSO; tests
	// put a fake clock here).
	refNow func(context.Context) (time.Time, error)

	// mu guards membership (membership.go): the heartbeat's view of the cluster, written
	// by the heartbeat, read by the cap and the sweep.
	mu sync.Mutex
	membership
}

// RuntimeConfig configures a Runtime. Zero values take the defaults.
type RuntimeConfig struct {
	// InstanceID names this instance; default a random 16-hex-digit id (a restarted process
	// is a new instance: the requests of its previous life expire on their own).
	InstanceID string
	// Address is where this instance serves HTTP, shown in the instance list ("": unknown).
	Address string
	Clock   clock.Clock  // default clock.Real{}
	Logger  *slog.Logger // default: discard
	// Gate is this instance's global cap (limiter.Gate): the runtime sets its capacity to
	// the instance's share of the cluster-wide max_concurrent_count. Required.
	Gate Gate
	// Share is the capacity-share policy, which cmd wires (engine.EvenShare): each
	// heartbeat reports the live instances it found through it (their sorted ids, this
	// one's included) and takes this instance's share of capacity (the cluster-wide
	// max_concurrent_count). The runtime lowers the share to what the others' claims leave
	// (see membership), so a policy cannot break the cap. Required.
	Share func(capacity int, live []string, id string) int
	// MaxConcurrentCount is the cluster-wide value while none is stored (the flag).
	MaxConcurrentCount int
	HeartbeatInterval  time.Duration // default 1 s
	InstanceTTL        time.Duration // default 5 s: a heartbeat older than this is a dead instance
	// MaxClockSkew is the most two instances' clocks may differ (default 50 ms). Each
	// instance keeps its own clock within half of it from PD's TSO, or stops admitting.
	MaxClockSkew time.Duration
	// TSOLag is how far the physical part of PD's timestamps may trail PD's clock (PD
	// advances it every 50 ms: default 50 ms), an uncertainty of every clock check.
	TSOLag       time.Duration
	AdmitTimeout time.Duration // default 2 s: then the admission fails closed
	// DefaultTimeout bounds a request whose admission gives none (default 30 s).
	DefaultTimeout time.Duration
	// ExpirySlack is added to a request's timeout for the moment its in-flight entry
	// expires (default 2 s): the time between the admission and the start of the request's
	// own timeout.
	ExpirySlack time.Duration
	// SweepInterval is how often the oldest live instance deletes domain records that can no
	// longer refuse anything (default 10 min), and runs TiKV's garbage collection.
	SweepInterval time.Duration
	// GCLifeTime is how long TiKV keeps old versions of a key: the oldest live instance
	// advances the cluster's GC safe point to now - GCLifeTime at every sweep. A domain's
	// record is written twice per request; without GC its versions pile up and reads slow
	// down. 0: the runtime runs no GC (the cluster has its own GC worker, e.g. TiDB's).
	GCLifeTime time.Duration

	stripeCount int // default defaultStripeCount; benchmarks compare
}

// Gate is this instance's global cap as the runtime drives it (limiter.Gate): the store
// names only what it uses, so that it imports neither the limiter nor the engine.
type Gate interface {
	Capacity() int
	SetCapacity(n int)
	InFlight() int
}

// Defaults of RuntimeConfig.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultInstanceTTL       = 5 * time.Second
	DefaultMaxClockSkew      = 50 * time.Millisecond
	DefaultTSOLag            = 50 * time.Millisecond
	DefaultAdmitTimeout      = 2 * time.Second
	DefaultExpirySlack       = 2 * time.Second
	DefaultSweepInterval     = 10 * time.Minute
)

var (
	_ downloader.SharedRuntime = (*Runtime)(nil)
	_ downloader.ClusterView   = (*Runtime)(nil)
	_ downloader.Fencer        = (*Runtime)(nil)
)

// NewRuntime returns the runtime of this instance over s. It does no I/O.
func NewRuntime(s *Store, cfg RuntimeConfig) (*Runtime, error) {
	if cfg.Gate == nil {
		return nil, errors.New("tikv runtime: a gate is required")
	}
	if cfg.Share == nil {
		return nil, errors.New("tikv runtime: a capacity-share policy is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.InstanceID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.InstanceID = hex.EncodeToString(b[:])
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	def(&cfg.InstanceTTL, DefaultInstanceTTL)
	def(&cfg.MaxClockSkew, DefaultMaxClockSkew)
	def(&cfg.TSOLag, DefaultTSOLag)
	def(&cfg.AdmitTimeout, DefaultAdmitTimeout)
	def(&cfg.DefaultTimeout, 30*time.Second)
	def(&cfg.ExpirySlack, DefaultExpirySlack)
	def(&cfg.SweepInterval, DefaultSweepInterval)
	if cfg.MaxConcurrentCount < 1 {
		cfg.MaxConcurrentCount = cfg.Gate.Capacity()
	}
	if cfg.stripeCount <= 0 {
		cfg.stripeCount = defaultStripeCount
	}
	r := &Runtime{s: s, cfg: cfg, clk: cfg.Clock, id: cfg.InstanceID,
		log:        cfg.Logger.With("component", "tikv_runtime", "instance_id", cfg.InstanceID),
		membership: membership{clusterCap: cfg.MaxConcurrentCount, address: cfg.Address}}
	r.admissionState.init(cfg.stripeCount)
	r.skewNs.Store(int64(cfg.MaxClockSkew))
	r.refNow = r.tsoNow
	return r, nil
}

// SetAddress changes the address this instance announces from its next heartbeat on (the
// listener's, once it is known).
func (r *Runtime) SetAddress(addr string) {
	r.mu.Lock()
	r.address = addr
	r.mu.Unlock()
}

// InstanceID returns this instance's id.
func (r *Runtime) InstanceID() string { return r.id }

// now is the time of a decision: never before the caller's own decision time.
func (r *Runtime) now(at time.Time) time.Time {
	if n := r.clk.Now(); n.After(at) {
		return n
	}
	return at
}

func (r *Runtime) sleep(ctx context.Context, d time.Duration) error {
	return clock.Sleep(ctx, r.clk, d)
}

// Run sends heartbeats every HeartbeatInterval, sweeps (see SweepInterval) on a goroutine
// of its own so that a long sweep never delays a heartbeat, and writes back finished
// requests until ctx ends, then writes back what is queued and removes this instance's
// record so that the others take its share at once. It returns nil after ctx ended.
func (r *Runtime) Run(ctx context.Context) error {
	stopWriter := r.startWriter()
	var sweeper sync.WaitGroup
	sweeper.Go(func() { r.sweepLoop(ctx) })
	for {
		t := r.clk.NewTimer(r.cfg.HeartbeatInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			sweeper.Wait()
			stopWriter()
			r.leave()
			return nil
		case <-t.C():
		}
		if err := r.Heartbeat(ctx); err != nil {
			if ctx.Err() != nil {
				continue
			}
			r.log.Warn("heartbeat failed", "error", err)
		}
	}
}

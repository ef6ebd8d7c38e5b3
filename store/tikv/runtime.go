package tikv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader"
	"downloader/clock"
	"downloader/engine"
	"downloader/limiter"
	"downloader/store/keys"
)

// Runtime is downloader:domain_runtime shared by every downloader instance on one TiKV
// cluster (engine.SharedRuntime), with the instances' heartbeats and the cluster-wide
// max_concurrent_count. Create it with NewRuntime, call Start, then Run until the service
// stops. Safe for concurrent use.
//
// # Keys
//
//	downloader:domain_runtime:{domain}
//	    One domain's shared state, JSON (domainRecord): last_request_at and the instance
//	    that set it, the latest min_interval_ms and its source, and the requests admitted
//	    and not yet finished (in_flight), each with its instance and the moment it expires.
//	downloader:domain_runtime::loss
//	    The table's loss marker {loss_at}. A domain with no record is treated as requested
//	    at loss_at (SPEC §2, conservative rebuild). The marker is written when it is found
//	    missing: at the cluster's first start, or after the table was lost (its keys
//	    deleted), so every domain then waits one interval from that moment.
//	downloader:domain_runtime::instance:{instance_id}
//	    One instance's heartbeat (instanceRecord): expires_at, in_flight_count, its share
//	    of the cap. An empty domain segment cannot be a domain, so these never collide.
//
// # Admission
//
// Each admission is one optimistic transaction on its domain's key: read the record,
// decide, write it back (contention is per domain; the instance serialises its own
// admissions of one domain, so transactions conflict only across instances). A request
// for domain d with interval I is admitted at t when
//
//   - t >= last_request_at + I, plus MaxClockSkew when another instance set
//     last_request_at (their clock, not ours: see below); and
//   - no request admitted by another instance is in flight and not yet on the wire. Such
//     a request may go on the wire at any moment until its instance writes back when it
//     did (SharedTicket.Wired, queued the moment its first bytes were written: then
//     wire_at is set in its entry and last_request_at moves to it), or until it expires
//     (slot + timeout: by then it went out or never will). Requests of this instance do
//     not count: its local limiter already spaces their wire moments.
//
// Entry A (Reserve) takes a future slot when the domain is only waiting for its interval,
// and asks again later while another instance has a request in flight. When the request
// ends, its ticket writes back last_request_at = max(last_request_at, wire moment) and
// removes it from in_flight, so the next request, from any instance, waits one interval
// from the moment this one reached the origin.
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
	s   *Store
	cfg RuntimeConfig
	clk clock.Clock
	log *slog.Logger
	id  string

	seq  atomic.Uint64 // admission ids
	seed maphash.Seed
	// stripes serialise this instance's admissions and write-backs of one domain (by hash),
	// so that its own transactions do not conflict: a channel of one token each, so that
	// waiting for one honours the admission's deadline. A write-back batch holds the
	// stripes of its domains while it commits: there are many, so that an admission rarely
	// waits for a batch it has no domain in (docs/benchmarks-tikv.md).
	stripes []chan struct{}

	// admits holds the admissions waiting for a batch (admitbatch.go).
	admits admitQueue

	// The write-back queue (writeback.go): wbOn while Run's writer takes from wbQueue.
	wbMu    sync.Mutex
	wbOn    bool
	wbQueue chan writeBack

	// inc is this process's incarnation (membership.go): a PD timestamp taken at its first
	// heartbeat, unique in the cluster; 0 before. Entries are this process's only when
	// both the instance id and the incarnation match.
	inc atomic.Uint64
	// skewNs is the clock skew allowance in force: the largest of the live instances'.
	skewNs atomic.Int64

	// refNow reads the reference clock the local one is checked against (PD's TSO; tests
	// put a fake clock here).
	refNow func(context.Context) (time.Time, error)

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
	// Gate is this instance's global cap: the runtime sets its capacity to the instance's
	// share of the cluster-wide max_concurrent_count. Required.
	Gate *limiter.Gate
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

// defaultStripeCount is the number of per-domain stripes (Runtime.stripes). With 256, a
// write-back batch of 64 domains held a quarter of them while it committed, and admissions
// spent most of their waiting there (block profile of BenchmarkAdmission).
const defaultStripeCount = 4096

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

// Key prefixes of the runtime table.
const (
	domainRuntimePrefix = "downloader:domain_runtime:"
	lossKey             = domainRuntimePrefix + ":loss"
	instancePrefix      = domainRuntimePrefix + ":instance:"
)

// foreignWaitHint bounds the wait announced while another instance has a request of the
// domain in flight: its real end is unknown, and most requests take under a second.
const foreignWaitHint = time.Second

func domainKey(domain string) []byte { return []byte(domainRuntimePrefix + keys.EscapeDomain(domain)) }

var (
	_ engine.SharedRuntime = (*Runtime)(nil)
	_ engine.ClusterView   = (*Runtime)(nil)
	_ engine.Fencer        = (*Runtime)(nil)
)

// NewRuntime returns the runtime of this instance over s. It does no I/O.
func NewRuntime(s *Store, cfg RuntimeConfig) (*Runtime, error) {
	if cfg.Gate == nil {
		return nil, errors.New("tikv runtime: a gate is required")
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
	r := &Runtime{s: s, cfg: cfg, clk: cfg.Clock, id: cfg.InstanceID, seed: maphash.MakeSeed(),
		log:        cfg.Logger.With("component", "tikv_runtime", "instance_id", cfg.InstanceID),
		membership: membership{clusterCap: cfg.MaxConcurrentCount, address: cfg.Address}}
	r.skewNs.Store(int64(cfg.MaxClockSkew))
	r.refNow = r.tsoNow
	if cfg.stripeCount <= 0 {
		cfg.stripeCount = defaultStripeCount
	}
	r.stripes = make([]chan struct{}, cfg.stripeCount)
	for i := range r.stripes {
		r.stripes[i] = make(chan struct{}, 1)
	}
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

// domainRecord is the value of downloader:domain_runtime:{domain}.
type domainRecord struct {
	LastRequestAt time.Time `json:"last_request_at"`
	// LastInstanceID set LastRequestAt, in its incarnation LastIncarnationID; "" when it is
	// the loss marker's (records written before incarnations have none: they count as
	// another process's).
	LastInstanceID    string     `json:"last_instance_id,omitempty"`
	LastIncarnationID uint64     `json:"last_incarnation_id,omitempty"`
	MinIntervalMs     int64      `json:"min_interval_ms"`
	IntervalSource    string     `json:"interval_source,omitempty"`
	InFlightRequests  []inFlight `json:"in_flight_requests,omitempty"`
}

// inFlight is one admitted request not yet written back.
type inFlight struct {
	InstanceID string `json:"instance_id"`
	// IncarnationID is the admitting process's (membership.go): an admission id is unique
	// within it, so (instance_id, incarnation, admission_id) names one request for ever.
	IncarnationID uint64    `json:"incarnation_id,omitempty"`
	AdmissionID   uint64    `json:"admission_id"`
	SlotAt        time.Time `json:"slot_at"`
	// WireAt is when the request went on the wire, once its instance wrote it back
	// (SharedTicket.Wired); zero until then. A wired entry no longer blocks the domain:
	// its moment is in last_request_at.
	WireAt time.Time `json:"wire_at,omitzero"`
	// ExpiresAt is when the request has gone on the wire or never will (its slot plus its
	// timeout plus slack, on its instance's clock).
	ExpiresAt time.Time `json:"expires_at"`
}

type lossRecord struct {
	LossAt time.Time `json:"loss_at"`
}

func (r *Runtime) stripeOf(domain string) int {
	return int(maphash.String(r.seed, domain) % uint64(len(r.stripes)))
}

// lockStripe takes stripe i, or gives up when ctx ends.
func (r *Runtime) lockStripe(ctx context.Context, i int) error {
	select {
	case r.stripes[i] <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Runtime) unlockStripe(i int) { <-r.stripes[i] }

// now is the time of a decision: never before the caller's own decision time.
func (r *Runtime) now(at time.Time) time.Time {
	if n := r.clk.Now(); n.After(at) {
		return n
	}
	return at
}

// loadDomain reads domain's record in txn; a missing record is one requested at the loss
// marker's moment (the marker is created at now when it is missing too).
func (r *Runtime) loadDomain(ctx context.Context, txn *transaction.KVTxn, key []byte, now time.Time) (domainRecord, error) {
	var rec domainRecord
	v, err := txn.Get(ctx, key)
	switch {
	case err == nil:
		if err := json.Unmarshal(v, &rec); err != nil {
			return rec, fmt.Errorf("decode %s: %w", key, err)
		}
		return rec, nil
	case !isNotFound(err):
		return rec, err
	}
	lossAt, err := r.lossAt(ctx, txn, now)
	if err != nil {
		return rec, err
	}
	return domainRecord{LastRequestAt: lossAt}, nil
}

// lossAt reads the loss marker in txn, writing it at now when it is missing.
func (r *Runtime) lossAt(ctx context.Context, txn *transaction.KVTxn, now time.Time) (time.Time, error) {
	v, err := txn.Get(ctx, []byte(lossKey))
	if err == nil {
		var l lossRecord
		if err := json.Unmarshal(v, &l); err != nil {
			return time.Time{}, fmt.Errorf("decode %s: %w", lossKey, err)
		}
		return l.LossAt, nil
	}
	if !isNotFound(err) {
		return time.Time{}, err
	}
	r.log.Warn("downloader:domain_runtime has no loss marker: the table is new or was lost; every domain waits one interval from now",
		"loss_at", now.UTC())
	b, _ := json.Marshal(lossRecord{LossAt: now.UTC()})
	if err := txn.Set([]byte(lossKey), b); err != nil {
		return time.Time{}, err
	}
	return now, nil
}

// foldExpired removes from rec.InFlightRequests the entries that expired (at ExpiresAt, plus the
// skew allowance when another instance wrote it): their requests went on the wire by then
// or never will, but when is unknown, so last_request_at moves to ExpiresAt, a wire moment
// no request of theirs can be later than, when that is later.
func (r *Runtime) foldExpired(rec *domainRecord, now time.Time) {
	kept := rec.InFlightRequests[:0]
	for _, f := range rec.InFlightRequests {
		end := f.ExpiresAt
		if !r.isMine(f.InstanceID, f.IncarnationID) {
			end = end.Add(r.skew())
		}
		if end.After(now) {
			kept = append(kept, f)
			continue
		}
		// A wired entry's moment is known (and already in last_request_at).
		sent := f.ExpiresAt
		if !f.WireAt.IsZero() {
			sent = f.WireAt
		}
		if sent.After(rec.LastRequestAt) {
			rec.LastRequestAt, rec.LastInstanceID, rec.LastIncarnationID = sent, f.InstanceID, f.IncarnationID
		}
	}
	rec.InFlightRequests = kept
}

// decision is what an admission found.
type decision struct {
	slot    time.Time     // the admitted slot
	wait    time.Duration // refused: ask again after wait
	admit   bool
	pruned  []inFlight // rec.InFlightRequests without the expired entries
	timeout time.Duration
}

// decide applies the admission rule (see Runtime) to rec at now.
func (r *Runtime) decide(rec *domainRecord, a *engine.SharedAdmit, now time.Time) decision {
	skew := r.skew()
	r.foldExpired(rec, now)
	base := rec.LastRequestAt
	if !r.isMine(rec.LastInstanceID, rec.LastIncarnationID) {
		base = base.Add(skew)
	}
	next := base.Add(a.MinInterval)
	d := decision{slot: now}
	if next.After(now) {
		d.slot = next
	}
	var foreign time.Time // the latest moment another instance's request may go out
	for _, f := range rec.InFlightRequests {
		if exp := f.ExpiresAt.Add(skew); !r.isMine(f.InstanceID, f.IncarnationID) && f.WireAt.IsZero() && exp.After(foreign) {
			foreign = exp
		}
	}
	d.pruned = rec.InFlightRequests
	if !foreign.IsZero() {
		// Another instance has a request of the domain in flight and not yet on the wire
		// as far as we know: its wire moment is known only as a bound. Ask again when the
		// interval allows, or within a second (its Wired write-back usually comes sooner).
		d.wait = max(d.slot.Sub(now), min(foreign.Add(a.MinInterval).Sub(now), max(a.MinInterval, foreignWaitHint)))
		return d
	}
	if d.slot.After(now) && (!a.Reserve || (!a.Deadline.IsZero() && d.slot.After(a.Deadline))) {
		d.wait = d.slot.Sub(now)
		return d
	}
	d.admit = true
	d.timeout = a.Timeout
	if d.timeout <= 0 {
		d.timeout = r.cfg.DefaultTimeout
	}
	return d
}

// Admit takes domain's cluster-wide admission (engine.SharedRuntime). It fails closed with
// an EUNAVAILABLE error when TiKV does not answer within AdmitTimeout.
func (r *Runtime) Admit(ctx context.Context, a engine.SharedAdmit) (engine.SharedTicket, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AdmitTimeout)
	defer cancel()
	key := domainKey(a.Domain)
	stripe := r.stripeOf(a.Domain)
	if err := r.lockStripe(ctx, stripe); err != nil {
		return nil, 0, unavailable("admit "+a.Domain, err)
	}
	defer r.unlockStripe(stripe)
	ctx, release, err := r.s.acquire(ctx, "admit")
	if err != nil {
		return nil, 0, err
	}
	defer release()

	// Self-fencing (membership.go): nothing is admitted once this instance's heartbeat is
	// late, its clock is off, or its id is another process's.
	if _, err := r.fence(r.now(a.Now)); err != nil {
		return nil, 0, err
	}
	// Decided with the other admissions pending at this moment, in one transaction
	// (admitbatch.go); this domain's stripe stays held meanwhile.
	req := &admitReq{a: &a, key: key, id: r.seq.Add(1), done: make(chan struct{}), wake: make(chan struct{}, 1)}
	r.admitGrouped(ctx, req)
	d, now, err := req.d, req.now, req.err
	if req.isFenced {
		return nil, 0, err
	}
	if errors.Is(err, errLeaseEnded) {
		return nil, 0, r.fenceErr(errLeaseEnded)
	}
	if err != nil {
		return nil, 0, unavailable("admit "+a.Domain, err)
	}
	if !d.admit {
		return nil, d.wait, nil
	}
	// The commit may have taken long: the request goes out only if this instance is still
	// in good standing (else its entry just expires).
	if _, err := r.fence(r.clk.Now()); err != nil {
		return nil, 0, err
	}
	return &ticket{r: r, domain: a.Domain, id: req.id}, d.slot.Sub(now), nil
}

func (r *Runtime) put(txn *transaction.KVTxn, key []byte, rec *domainRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return txn.Set(key, b)
}

// ticket is one admitted request (engine.SharedTicket).
type ticket struct {
	r      *Runtime
	domain string
	id     uint64
	wired  atomic.Bool
	done   atomic.Bool
}

// Wired queues the write-back of the request's wire moment (writeback.go): wire_at in its
// in-flight entry, and last_request_at moves to it, so the other instances space their
// next request from it instead of waiting for this one to end. It never blocks: when the
// writer is not running or its queue is full it does nothing, and the others wait for Done
// or the entry's expiry as before.
func (t *ticket) Wired(at time.Time) {
	if t.done.Load() || !t.wired.CompareAndSwap(false, true) {
		return
	}
	t.r.enqueue(writeBack{domain: t.domain, id: t.id, wireAt: at, isWired: true})
}

// Done writes back the request's end (writeback.go): last_request_at moves to wireAt if
// that is later, and the request leaves in_flight. While Run runs, the write-back is
// queued and written with others in one transaction, off the request's path; otherwise
// (or when the queue is full) it is written before Done returns. If TiKV cannot be reached
// the entry stays until it expires, which only delays the domain's next request on other
// instances.
func (t *ticket) Done(ctx context.Context, wireAt time.Time) {
	if !t.done.CompareAndSwap(false, true) {
		return
	}
	wb := writeBack{domain: t.domain, id: t.id, wireAt: wireAt}
	if t.r.enqueue(wb) {
		return
	}
	t.r.flush(ctx, []writeBack{wb})
}

// DomainRuntime is one domain's cluster-wide state in downloader:domain_runtime.
type DomainRuntime = engine.ClusterDomain

// InFlightRequest is one admitted request not yet written back, as the cluster sees it.
type InFlightRequest = engine.ClusterInFlight

// Domain returns domain's cluster-wide state.
func (r *Runtime) Domain(ctx context.Context, domain string) (DomainRuntime, error) {
	ctx, release, err := r.s.acquire(ctx, "domain runtime")
	if err != nil {
		return DomainRuntime{}, err
	}
	defer release()
	insts, err := r.instances(ctx)
	if err != nil {
		return DomainRuntime{}, unavailable("domain runtime", err)
	}
	now := r.clk.Now()
	live := map[string]bool{r.id: true}
	for _, in := range insts {
		if in.ExpiresAt.Add(r.skew()).After(now) {
			live[in.InstanceID] = true
		}
	}
	out := DomainRuntime{Domain: domain}
	v, ok, err := r.s.get(ctx, domainKey(domain))
	if err != nil {
		return out, unavailable("domain runtime", err)
	}
	if !ok {
		l, ok, err := r.s.get(ctx, []byte(lossKey))
		if err != nil {
			return out, unavailable("domain runtime", err)
		}
		if ok {
			var lr lossRecord
			if err := json.Unmarshal(l, &lr); err != nil {
				return out, fmt.Errorf("tikv runtime: decode %s: %w", lossKey, err)
			}
			out.LastRequestAt = lr.LossAt
		}
		return out, nil
	}
	var rec domainRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return out, fmt.Errorf("tikv runtime: decode %s: %w", domain, err)
	}
	out.IsStored = true
	out.MinIntervalMs, out.IntervalSource, out.LastRequestAt = rec.MinIntervalMs, rec.IntervalSource, rec.LastRequestAt
	out.LastInstanceID = rec.LastInstanceID
	out.InFlightRequests = []InFlightRequest{}
	for _, f := range rec.InFlightRequests {
		if !f.ExpiresAt.Add(r.skew()).After(now) {
			continue
		}
		e := InFlightRequest{InstanceID: f.InstanceID, SlotAt: f.SlotAt, ExpiresAt: f.ExpiresAt, IsInstanceLive: live[f.InstanceID]}
		if !f.WireAt.IsZero() {
			w := f.WireAt
			e.WireAt = &w
		}
		out.InFlightRequests = append(out.InFlightRequests, e)
		if live[f.InstanceID] {
			out.InFlightCount++
		}
	}
	return out, nil
}

// sweepBatch is how many records one sweep transaction looks at.
const sweepBatch = 256

// Sweep deletes the domain records that can no longer refuse any request: nothing in
// flight (or only expired entries) and last_request_at older than the largest interval the
// service accepts (plus the clock skew allowance). A missing record reads as requested at
// the loss marker's moment, which is earlier still, so deleting one changes no decision.
// It returns how many it deleted.
func (r *Runtime) Sweep(ctx context.Context, now time.Time) (int, error) {
	horizon := downloader.MaxMinInterval + r.skew()
	deleted := 0
	start := []byte(domainRuntimePrefix)
	end := keys.PrefixEnd(domainRuntimePrefix)
	for {
		var last []byte
		n, err := r.sweepBatch(ctx, start, end, now, horizon, &last)
		if err != nil {
			return deleted, err
		}
		deleted += n
		if last == nil {
			return deleted, nil
		}
		start = append(last, 0)
	}
}

// sweepBatch looks at up to sweepBatch records from start, deletes those that can no
// longer refuse anything, and sets *last to the last key seen (nil at the end).
func (r *Runtime) sweepBatch(ctx context.Context, start, end []byte, now time.Time, horizon time.Duration, last *[]byte) (int, error) {
	ctx, release, err := r.s.acquire(ctx, "sweep")
	if err != nil {
		return 0, err
	}
	defer release()
	n := 0
	err = r.s.update(ctx, func(txn *transaction.KVTxn) error {
		n, *last = 0, nil
		var doomed [][]byte
		it, err := txn.Iter(start, end)
		if err != nil {
			return err
		}
		for seen := 0; it.Valid() && seen < sweepBatch; seen++ {
			k := append([]byte(nil), it.Key()...)
			*last = k
			if len(k) > len(domainRuntimePrefix) && k[len(domainRuntimePrefix)] != ':' {
				var rec domainRecord
				if json.Unmarshal(it.Value(), &rec) == nil && r.sweepable(&rec, now, horizon) {
					doomed = append(doomed, k)
				}
			}
			if err := it.Next(); err != nil {
				it.Close()
				return err
			}
		}
		it.Close()
		for _, k := range doomed {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		n = len(doomed)
		return nil
	})
	if err != nil {
		return 0, unavailable("sweep", err)
	}
	return n, nil
}

func (r *Runtime) sweepable(rec *domainRecord, now time.Time, horizon time.Duration) bool {
	r.foldExpired(rec, now)
	return len(rec.InFlightRequests) == 0 && !rec.LastRequestAt.Add(horizon).After(now)
}

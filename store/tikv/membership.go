package tikv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tikv/client-go/v2/txnkv/transaction"
	"github.com/tikv/client-go/v2/txnkv/txnsnapshot"

	"downloader"
	"downloader/store/keys"
)

// # Membership, the cap across machines, and self-fencing
//
// Every process is an incarnation: its instance id (random, or --instance-id) and a PD
// timestamp taken at its first heartbeat. An in-flight entry names both, so a process
// restarted under a fixed id treats its predecessor's entries (and the last_request_at it
// set) as another instance's: it waits for their wire moment or their expiry, with the
// skew allowance, and its write-backs touch only its own entries. One heartbeat record
// per id: a process that finds the record held by another incarnation whose heartbeat is
// live is refused (Start waits for a dead predecessor's record to expire first).
//
// Each heartbeat is one transaction that reads every instance record and the settings and
// writes this instance's record: expires_at = now + InstanceTTL is its lease. The others
// count it live until expires_at + skew on their clocks, which is no earlier than
// expires_at on its own clock while clocks agree within the allowance; so the instance
// admits nothing once its own clock reaches expires_at of its last committed heartbeat
// (fence): by the time anyone may drop it, it has stopped. A reserved slot past the lease
// is not given (the engine asks again at the slot).
//
// The cap: max_concurrent_count is split over the live instances by the capacity-share
// policy (RuntimeConfig.Share: evenly, as cmd wires it); a joining instance has no share
// for its first two heartbeat intervals. An instance's claim on the cap is max(in_flight_count, capacity_share_count) of its record: what it
// may have in flight until its next heartbeat (its gate admits below its capacity; above
// it requests only end). An instance's capacity is its share, lowered so that its own
// plus the others' claims stay within the cap: a join, or a share that moved from one
// instance to another, takes effect as the requests of the instance that gave it up end.
// A dropped instance's claim stays counted until claim_expires_at (its lease end plus
// the request timeout plus slack): by then every request it admitted has ended. Until
// then it also keeps its place in the split: two instances whose heartbeats were both
// starved past their leases each find the other dropped, and their heartbeats, two
// transactions that each read the other's record and write only their own, may commit
// side by side; were the split over the live ones alone, each would take the whole cap
// less the other's old claim, together more than the cap (SPEC §2, global cap).
// With the claiming ones in the split each takes no more than its share of them.
type membership struct {
	clusterCap int      // max_concurrent_count in force, cluster-wide
	live       []string // live instance ids, sorted, self included
	// sharers are the ids the cap is split over, sorted, self included: the live ones and
	// the dropped ones whose claim has not ended (see membership).
	sharers   []string
	joinedAt  time.Time // first successful heartbeat; zero before
	startedAt time.Time
	address   string // shown in the instance list (SetAddress)
	// othersClaim is the sum of the other instances' claims at the last heartbeat.
	othersClaim int
	// inherited is the claim of a dead predecessor under this id (its record was taken
	// over), counted against this instance until inheritedUntil.
	inherited      int
	inheritedUntil time.Time
	// takenOver is set for good when another process took this id over: this one is
	// fenced and should be stopped.
	takenOver error

	// Clock checks against PD's TSO (checkClock).
	samples        []clockSample
	skewErr        error // the offset cannot be bounded within half the allowance
	offsetMs       *int64
	skewWarned     time.Time
	mismatchWarned time.Time

	// standing is what Admit checks, read without the lock.
	standing standingBox
}

// standing is this instance's right to admit: until leaseUntil, unless err.
type standing struct {
	leaseUntil time.Time
	err        error
}

// standingBox holds the current standing (a mutex of its own: Admit reads it on every
// admission, the heartbeat writes it).
type standingBox struct {
	mu sync.RWMutex
	s  standing
}

func (b *standingBox) load() standing {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.s
}

func (b *standingBox) store(s standing) {
	b.mu.Lock()
	b.s = s
	b.mu.Unlock()
}

// Fence reasons, as the instance list shows them (fence_reason). A process that lost its
// id to another shows none: the record is the other's.
const (
	fenceHeartbeatLate = downloader.FenceHeartbeatLate
	fenceClockSkewed   = downloader.FenceClockSkewed
)

var (
	errLeaseEnded    = errors.New("the instance's last heartbeat is about to expire: the others may count it dead")
	errClockSkewed   = errors.New("the local clock cannot be bounded within half of max_clock_skew_ms from PD's TSO")
	errNotRegistered = errors.New("the instance has not registered with the cluster yet")
)

// fenced wraps a reason this instance admits nothing: EUNAVAILABLE (the request is not
// sent: SPEC §2 fail closed), with the cause for the log.
func fenced(cause error) error {
	return fmt.Errorf("tikv runtime: %w", errors.Join(
		downloader.Errorf(downloader.EUNAVAILABLE, "this instance is fenced from the cluster: %s", cause), cause))
}

// fenceErr is fenced for a cause of Admit's.
func (r *Runtime) fenceErr(cause error) error { return fenced(cause) }

// idInUseError is a heartbeat that found this id's record held by another live process.
type idInUseError struct {
	id          string
	incarnation uint64
	heartbeatAt time.Time
	expiresAt   time.Time
}

func (e *idInUseError) Error() string {
	return fmt.Sprintf("instance id %q is in use by another live process (incarnation %d, last heartbeat at %s)",
		e.id, e.incarnation, e.heartbeatAt.UTC().Format(time.RFC3339Nano))
}

func isInstanceIDInUse(err error) bool {
	var e *idInUseError
	return errors.As(err, &e)
}

func isClockSkewed(err error) bool { return errors.Is(err, errClockSkewed) }

// fence returns until when this instance may admit, or why it may not (EUNAVAILABLE).
func (r *Runtime) fence(now time.Time) (time.Time, error) {
	st := r.standing.load()
	switch {
	case st.err != nil:
		return time.Time{}, fenced(st.err)
	case st.leaseUntil.IsZero():
		return time.Time{}, fenced(errNotRegistered)
	case !now.Before(st.leaseUntil):
		return time.Time{}, fenced(errLeaseEnded)
	}
	return st.leaseUntil, nil
}

// FenceState is whether this instance admits nothing at now, and why: what fence would
// answer, from local state only (the metrics read it at every scrape).
func (r *Runtime) FenceState(now time.Time) downloader.FenceState {
	st := r.standing.load()
	reason := ""
	switch {
	case st.err != nil && isInstanceIDInUse(st.err):
		reason = downloader.FenceInstanceIDTakenOver
	case st.err != nil && isClockSkewed(st.err):
		reason = downloader.FenceClockSkewed
	case st.err != nil: // no other cause is stored today; fail closed in words too
		reason = downloader.FenceHeartbeatLate
	case st.leaseUntil.IsZero():
		reason = downloader.FenceNotRegistered
	case !now.Before(st.leaseUntil):
		reason = downloader.FenceHeartbeatLate
	}
	return downloader.FenceState{IsFenced: reason != "", FenceReason: reason}
}

// isMine reports whether an entry of instance id in incarnation inc is this process's.
func (r *Runtime) isMine(id string, inc uint64) bool {
	return id == r.id && inc != 0 && inc == r.inc.Load()
}

// skew is the clock skew allowance in force: the largest of the live instances' own, so
// that instances started with different --max-clock-skew-ms stay safe together.
func (r *Runtime) skew() time.Duration { return time.Duration(r.skewNs.Load()) }

// instanceRecord is the value of downloader:domain_runtime::instance:{id}.
type instanceRecord struct {
	InstanceID         string    `json:"instance_id"`
	IncarnationID      uint64    `json:"incarnation_id,omitempty"`
	Address            string    `json:"address,omitempty"`
	StartedAt          time.Time `json:"started_at"`
	HeartbeatAt        time.Time `json:"heartbeat_at"`
	ExpiresAt          time.Time `json:"expires_at"`
	InFlightCount      int       `json:"in_flight_count"`
	CapacityShareCount int       `json:"capacity_share_count"`
	ClockOffsetMs      *int64    `json:"clock_offset_ms"` // the local clock minus PD's TSO, if measured
	MaxClockSkewMs     int64     `json:"max_clock_skew_ms,omitempty"`
	// ClaimExpiresAt: every request the instance admitted until ExpiresAt has ended by then.
	ClaimExpiresAt time.Time `json:"claim_expires_at,omitzero"`
	IsFenced       bool      `json:"is_fenced,omitempty"`
	FenceReason    string    `json:"fence_reason,omitempty"`
	// A dead predecessor's claim under the same id, counted until its own expiry.
	InheritedClaimCount     int       `json:"inherited_claim_count,omitempty"`
	InheritedClaimExpiresAt time.Time `json:"inherited_claim_expires_at,omitzero"`
}

func (in *instanceRecord) isLive(now time.Time, skew time.Duration) bool {
	return in.ExpiresAt.Add(skew).After(now)
}

// claim is how many requests the instance may have in flight, as far as the others know.
func (in *instanceRecord) claim(now time.Time, skew time.Duration) int {
	c := 0
	if in.isLive(now, skew) || in.ClaimExpiresAt.Add(skew).After(now) {
		c = max(in.InFlightCount, in.CapacityShareCount)
	}
	if in.InheritedClaimExpiresAt.Add(skew).After(now) {
		c += in.InheritedClaimCount
	}
	return c
}

// claimUntil is when in's claim ends.
func (in *instanceRecord) claimUntil() time.Time {
	t := in.ClaimExpiresAt
	if t.IsZero() {
		t = in.ExpiresAt
	}
	if in.InheritedClaimExpiresAt.After(t) {
		t = in.InheritedClaimExpiresAt
	}
	return t
}

// MaxConcurrentCount returns the cluster-wide max_concurrent_count in force.
func (r *Runtime) MaxConcurrentCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clusterCap
}

// ApplyMaxConcurrentCount applies a cluster-wide value just stored through this instance:
// its share goes to the gate at once (the others follow at their next heartbeat).
func (r *Runtime) ApplyMaxConcurrentCount(n int) {
	r.mu.Lock()
	r.clusterCap = n
	r.applyCapacityLocked(r.capacityLocked(r.clk.Now()))
	r.mu.Unlock()
}

// capacityLocked is this instance's capacity at now (see membership): its share, within
// what the others' claims and an inherited claim leave of the cap. Requires r.mu held.
func (r *Runtime) capacityLocked(now time.Time) int {
	if r.joinedAt.IsZero() || now.Before(r.joinedAt.Add(2*r.cfg.HeartbeatInterval)) {
		return 0
	}
	room := r.clusterCap - r.othersClaim
	if r.inheritedUntil.Add(r.skew()).After(now) {
		room -= r.inherited
	}
	return max(0, min(r.cfg.Share(r.clusterCap, r.sharers, r.id), room))
}

// applyCapacityLocked sets the gate to n. Requires r.mu held.
func (r *Runtime) applyCapacityLocked(n int) {
	if r.cfg.Gate.Capacity() != n {
		r.log.Info("capacity share changed", "capacity_share", n, "max_concurrent_count", r.clusterCap,
			"live_instance_count", len(r.live), "others_claim_count", r.othersClaim)
		r.cfg.Gate.SetCapacity(n)
	}
}

// Start registers this instance (its first heartbeat) and returns once its share of the
// cap applies, two heartbeat intervals later, when every other instance has made room for
// it. When its id's record is held by another process, it waits for that record to expire
// (a predecessor that died) and fails if it is renewed meanwhile (a live process: the id
// is in use). It fails when TiKV cannot be reached.
func (r *Runtime) Start(ctx context.Context) error {
	r.mu.Lock()
	r.startedAt = r.clk.Now()
	r.mu.Unlock()
	// firstLook is this clock's time before the read that first found the record held. A
	// holder proves it is alive only by a heartbeat it began after that: one whose
	// heartbeat_at is past firstLook plus the skew allowance. A later heartbeat_at alone
	// proves nothing: a process that died with a heartbeat in flight may have it applied
	// after its death (the write was already on the network), renewing its record once
	// more; this process then waits for that expiry too.
	var firstLook time.Time
	for {
		look := r.clk.Now()
		err := r.joinHeartbeat(ctx)
		var inUse *idInUseError
		if !errors.As(err, &inUse) {
			if err != nil {
				return err
			}
			break
		}
		if firstLook.IsZero() {
			firstLook = look
		} else if inUse.heartbeatAt.After(firstLook.Add(r.skew())) {
			return fmt.Errorf("tikv runtime: %w", err)
		}
		r.log.Warn("this instance id's heartbeat record is held by another process: waiting for it to expire",
			"holder_incarnation", inUse.incarnation, "holder_expires_at", inUse.expiresAt)
		if err := r.sleep(ctx, inUse.expiresAt.Add(r.skew()).Sub(r.clk.Now())+r.cfg.HeartbeatInterval); err != nil {
			return err
		}
	}
	if err := r.sleep(ctx, 2*r.cfg.HeartbeatInterval); err != nil {
		return err
	}
	return r.joinHeartbeat(ctx)
}

// joinRetryMax bounds the pause between a joining instance's heartbeats while TiKV does
// not answer.
const joinRetryMax = 5 * time.Second

// joinHeartbeat is Start's heartbeat: while TiKV does not answer (a region's leader being
// elected, PD failing over, a client starved of CPU: "execution result undetermined" at
// the heartbeat's deadline) it tries again, HeartbeatInterval apart and doubling up to
// joinRetryMax, until ctx ends. A service that starts in such a moment then joins when
// TiKV answers instead of exiting. Nothing is admitted meanwhile: an instance that has not
// joined has no lease (fence) and a capacity share of 0. A retried heartbeat keeps the
// incarnation its first attempt took, so a first attempt that was applied after all is
// found as this process's own record, not another's.
func (r *Runtime) joinHeartbeat(ctx context.Context) error {
	pause := r.cfg.HeartbeatInterval
	for {
		err := r.Heartbeat(ctx)
		if err == nil || !errors.Is(err, errNoAnswer) || ctx.Err() != nil {
			return err
		}
		r.log.Warn("joining the cluster: TiKV did not answer the heartbeat; trying again", "retry_after_seconds", pause.Seconds(), "error", err)
		if serr := r.sleep(ctx, pause); serr != nil {
			return err
		}
		pause = min(2*pause, joinRetryMax)
	}
}

// leave deletes this instance's heartbeat record (best effort), unless another process
// holds it.
func (r *Runtime) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.AdmitTimeout)
	defer cancel()
	ctx, release, err := r.s.acquire(ctx, "leave")
	if err != nil {
		return
	}
	defer release()
	key := []byte(instancePrefix + r.id)
	err = r.s.update(ctx, func(txn *transaction.KVTxn) error {
		v, err := txn.Get(ctx, key)
		if isNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		var in instanceRecord
		if json.Unmarshal(v, &in) == nil && in.IncarnationID != r.inc.Load() {
			return nil // another process's now
		}
		return txn.Delete(key)
	})
	if err != nil {
		r.log.Warn("remove the instance record: it expires instead", "error", err)
	}
}

func (r *Runtime) isOldest() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live) > 0 && r.live[0] == r.id
}

// heartbeatView is what one heartbeat transaction found.
type heartbeatView struct {
	now            time.Time
	live           []string
	sharers        []string // live, or dropped with their claim not ended
	clusterCap     int
	othersClaim    int
	skew           time.Duration
	mismatch       []string // live instances whose allowance differs from ours
	inherited      int
	inheritedUntil time.Time
	capacity       int
	dead           [][]byte
}

// Heartbeat writes this instance's record (its lease), makes sure the loss marker exists,
// reads the live instances and the cluster-wide settings in the same transaction, and
// applies this instance's capacity. Run calls it every HeartbeatInterval.
func (r *Runtime) Heartbeat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AdmitTimeout)
	defer cancel()
	r.mu.Lock()
	taken := r.takenOver
	r.mu.Unlock()
	if taken != nil {
		return taken
	}
	ctx, release, err := r.s.acquire(ctx, "heartbeat")
	if err != nil {
		return err
	}
	defer release()
	if r.inc.Load() == 0 {
		ts, err := r.s.timestamp(ctx)
		if err != nil {
			return unavailable("heartbeat", err)
		}
		r.inc.CompareAndSwap(0, ts)
	}
	inc := r.inc.Load()
	r.checkClock(ctx)
	r.mu.Lock()
	if skewErr := r.skewErr; skewErr != nil && r.takenOver == nil {
		// Fenced at once, whether or not this heartbeat commits.
		st := r.standing.load()
		st.err = skewErr
		r.standing.store(st)
	}
	r.mu.Unlock()

	r.mu.Lock()
	rec := instanceRecord{InstanceID: r.id, IncarnationID: inc, Address: r.address, StartedAt: r.startedAt.UTC(),
		ClockOffsetMs: r.offsetMs, MaxClockSkewMs: r.cfg.MaxClockSkew.Milliseconds()}
	if r.skewErr != nil {
		rec.IsFenced, rec.FenceReason = true, fenceClockSkewed
	}
	registered := !r.joinedAt.IsZero()
	snapshot := r.membership.copyForView()
	r.mu.Unlock()

	var v heartbeatView
	err = r.s.update(ctx, func(txn *transaction.KVTxn) error {
		var err error
		v, err = r.viewIn(ctx, txn, inc, snapshot)
		if err != nil {
			return err
		}
		// Joining, the record is held by no live incarnation (viewIn refuses otherwise):
		// a lock a dead one left on it would hold this write for up to its TTL.
		if !registered {
			if err := r.clearLeftLock(ctx, txn.StartTS()); err != nil {
				return err
			}
		}
		// Shrinking applies before the record says so, growing after it is committed: the
		// record never claims less than the gate allows.
		if v.capacity < r.cfg.Gate.Capacity() {
			r.cfg.Gate.SetCapacity(v.capacity)
		}
		rec.HeartbeatAt, rec.ExpiresAt = v.now.UTC(), v.now.Add(r.cfg.InstanceTTL).UTC()
		rec.ClaimExpiresAt = rec.ExpiresAt.Add(r.cfg.DefaultTimeout + r.cfg.ExpirySlack)
		rec.InFlightCount, rec.CapacityShareCount = r.cfg.Gate.InFlight(), v.capacity
		rec.InheritedClaimCount, rec.InheritedClaimExpiresAt = v.inherited, v.inheritedUntil.UTC()
		b, err := json.Marshal(&rec)
		if err != nil {
			return err
		}
		if err := txn.Set([]byte(instancePrefix+r.id), b); err != nil {
			return err
		}
		_, err = r.lossAt(ctx, txn, v.now)
		return err
	})
	var inUse *idInUseError
	if errors.As(err, &inUse) {
		if registered {
			// This process lost its id to another (it was cut off past its lease, and a
			// new process took the id over): it stays fenced for good.
			r.mu.Lock()
			r.takenOver = fenced(err)
			r.cfg.Gate.SetCapacity(0)
			r.mu.Unlock()
			r.standing.store(standing{err: err})
			r.log.Error("this instance's id was taken over by another process: it admits nothing any more; stop it", "error", err)
		}
		return err
	}
	if err != nil {
		return unavailable("heartbeat", err)
	}
	r.skewNs.Store(int64(v.skew))
	r.mu.Lock()
	r.clusterCap, r.live, r.sharers, r.othersClaim = v.clusterCap, v.live, v.sharers, v.othersClaim
	r.inherited, r.inheritedUntil = v.inherited, v.inheritedUntil
	if r.joinedAt.IsZero() {
		r.joinedAt = v.now
	}
	r.applyCapacityLocked(v.capacity)
	st := standing{leaseUntil: v.now.Add(r.cfg.InstanceTTL), err: nil}
	if r.skewErr != nil {
		st.err = r.skewErr
	}
	warnMismatch := len(v.mismatch) > 0 && (r.mismatchWarned.IsZero() || v.now.Sub(r.mismatchWarned) > time.Minute)
	if warnMismatch {
		r.mismatchWarned = v.now
	}
	r.mu.Unlock()
	r.standing.store(st)
	if warnMismatch {
		r.log.Warn("instances run with different --max-clock-skew-ms: every instance uses the largest; give them all the same",
			"max_clock_skew_ms", r.cfg.MaxClockSkew.Milliseconds(), "effective_max_clock_skew_ms", v.skew.Milliseconds(),
			"differing_instance_ids", v.mismatch)
	}
	if len(v.dead) > 0 {
		// Records of instances gone (and their claims over) for a minute: any instance may
		// delete them.
		_ = r.s.update(ctx, func(txn *transaction.KVTxn) error {
			for _, k := range v.dead {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return nil
}

// viewState is what viewIn needs of the membership, copied under the lock.
type viewState struct {
	joinedAt       time.Time
	clusterCap     int
	inherited      int
	inheritedUntil time.Time
}

func (m *membership) copyForView() viewState {
	return viewState{joinedAt: m.joinedAt, clusterCap: m.clusterCap, inherited: m.inherited, inheritedUntil: m.inheritedUntil}
}

// viewIn reads the instance records and the settings in txn and decides this instance's
// standing: an error when another live process holds its id.
func (r *Runtime) viewIn(ctx context.Context, txn *transaction.KVTxn, inc uint64, st viewState) (heartbeatView, error) {
	v := heartbeatView{now: r.clk.Now(), clusterCap: st.clusterCap, skew: r.cfg.MaxClockSkew,
		inherited: st.inherited, inheritedUntil: st.inheritedUntil}
	insts, err := r.scanInstances(ctx, txn.StartTS())
	if err != nil {
		return v, err
	}
	if b, err := txn.Get(ctx, settingsKey); err == nil {
		var s downloader.Settings
		if json.Unmarshal(b, &s) == nil && s.MaxConcurrentCount >= 1 {
			v.clusterCap = s.MaxConcurrentCount
		}
	} else if !isNotFound(err) {
		return v, err
	}
	// The allowance first: the largest of the live instances' (ours included).
	for _, in := range insts {
		if in.InstanceID != r.id && in.isLive(v.now, r.skew()) && in.MaxClockSkewMs > 0 {
			if s := time.Duration(in.MaxClockSkewMs) * time.Millisecond; s != r.cfg.MaxClockSkew.Truncate(time.Millisecond) {
				v.mismatch = append(v.mismatch, in.InstanceID)
				v.skew = max(v.skew, s)
			}
		}
	}
	v.live, v.sharers = []string{r.id}, []string{r.id}
	for _, in := range insts {
		if in.InstanceID == r.id {
			if in.IncarnationID == inc {
				continue
			}
			if in.isLive(v.now, v.skew) {
				return v, &idInUseError{id: r.id, incarnation: in.IncarnationID, heartbeatAt: in.HeartbeatAt, expiresAt: in.ExpiresAt}
			}
			// A dead predecessor's record: its requests may still be running; its claim is
			// counted against this instance until it ends.
			if c := in.claim(v.now, v.skew); c > 0 {
				v.inherited, v.inheritedUntil = c, in.claimUntil()
			}
			continue
		}
		if in.isLive(v.now, v.skew) {
			v.live = append(v.live, in.InstanceID)
		}
		if in.isLive(v.now, v.skew) || in.ClaimExpiresAt.Add(v.skew).After(v.now) {
			v.sharers = append(v.sharers, in.InstanceID)
		}
		v.othersClaim += in.claim(v.now, v.skew)
		if in.claimUntil().Add(v.skew + time.Minute).Before(v.now) {
			v.dead = append(v.dead, []byte(instancePrefix+in.InstanceID))
		}
	}
	slices.Sort(v.live)
	slices.Sort(v.sharers)
	if !v.inheritedUntil.Add(v.skew).After(v.now) {
		v.inherited, v.inheritedUntil = 0, time.Time{}
	}
	joinedAt := st.joinedAt
	if joinedAt.IsZero() {
		joinedAt = v.now
	}
	if !v.now.Before(joinedAt.Add(2 * r.cfg.HeartbeatInterval)) {
		v.capacity = max(0, min(r.cfg.Share(v.clusterCap, v.sharers, r.id), v.clusterCap-v.othersClaim-v.inherited))
	}
	return v, nil
}

// scanInstances reads every instance record at ts, read-committed: a heartbeat of
// another instance in progress (or one left half-committed by an instance that died) holds
// a lock on its record for up to TiKV's lock TTL, and a snapshot read would wait for it,
// delaying this heartbeat past its lease. The last committed record is what counts: the
// instance's own record is checked by the write conflict on it. It gives up when ctx ends
// (scanWithin).
func (r *Runtime) scanInstances(ctx context.Context, ts uint64) ([]instanceRecord, error) {
	snap := r.s.kv.GetSnapshot(ts)
	snap.SetIsolationLevel(txnsnapshot.RC)
	return scanWithin(ctx, snap, func() ([]instanceRecord, error) {
		it, err := snap.Iter([]byte(instancePrefix), keys.PrefixEnd(instancePrefix))
		if err != nil {
			return nil, err
		}
		defer it.Close()
		var out []instanceRecord
		for it.Valid() {
			var in instanceRecord
			if err := json.Unmarshal(it.Value(), &in); err != nil {
				return nil, fmt.Errorf("decode %s: %w", it.Key(), err)
			}
			out = append(out, in)
			if err := it.Next(); err != nil {
				return nil, err
			}
		}
		return out, nil
	})
}

// instances reads every instance record, as last committed.
func (r *Runtime) instances(ctx context.Context) ([]instanceRecord, error) {
	ts, err := r.s.timestamp(ctx)
	if err != nil {
		return nil, err
	}
	return r.scanInstances(ctx, ts)
}

// Instance is one downloader instance as the cluster sees it.
type Instance = downloader.ClusterInstance

// Instances lists the instances that sent a heartbeat in the last minute, live or not. A
// live instance past its lease shows fenced (heartbeat_late).
func (r *Runtime) Instances(ctx context.Context) ([]Instance, error) {
	ctx, release, err := r.s.acquire(ctx, "instances")
	if err != nil {
		return nil, err
	}
	defer release()
	recs, err := r.instances(ctx)
	if err != nil {
		return nil, unavailable("instances", err)
	}
	now := r.clk.Now()
	out := make([]Instance, len(recs))
	for i, in := range recs {
		out[i] = Instance{InstanceID: in.InstanceID, IncarnationID: in.IncarnationID, Address: in.Address, StartedAt: in.StartedAt,
			LastHeartbeatAt: in.HeartbeatAt, ExpiresAt: in.ExpiresAt, IsLive: in.isLive(now, r.skew()),
			InFlightCount: in.InFlightCount, CapacityShareCount: in.CapacityShareCount, ClaimCount: in.claim(now, r.skew()),
			ClockOffsetMs: in.ClockOffsetMs, MaxClockSkewMs: in.MaxClockSkewMs, IsFenced: in.IsFenced, FenceReason: in.FenceReason}
		if !out[i].IsFenced && !now.Before(in.ExpiresAt) {
			out[i].IsFenced, out[i].FenceReason = true, fenceHeartbeatLate
		}
	}
	return out, nil
}

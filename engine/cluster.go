package engine

import (
	"context"
	"time"

	"downloader/egress"
)

// ClusterView is the cluster-wide view of a SharedRuntime that has one (store/tikv's
// Runtime): the instances and a domain's shared record. Engine.Cluster finds it.
type ClusterView interface {
	InstanceID() string
	Instances(ctx context.Context) ([]ClusterInstance, error)
	Domain(ctx context.Context, domain string) (ClusterDomain, error)
}

// ClusterInstance is one downloader instance as the cluster sees it (its heartbeat).
type ClusterInstance struct {
	InstanceID string `json:"instance_id"`
	// Address is where the instance serves HTTP, as it announced it ("" if unknown).
	Address         string    `json:"address"`
	StartedAt       time.Time `json:"started_at"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
	ExpiresAt       time.Time `json:"expires_at"`
	IsLive          bool      `json:"is_live"`
	InFlightCount   int       `json:"in_flight_count"`
	// CapacityShareCount is the instance's share of the cluster-wide max_concurrent_count.
	CapacityShareCount int    `json:"capacity_share_count"`
	ClockOffsetMs      *int64 `json:"clock_offset_ms"` // the local clock minus PD's TSO, if measured
	// IncarnationID tells apart the processes that ran under one instance id (a PD
	// timestamp taken when the process registered).
	IncarnationID uint64 `json:"incarnation_id"`
	// ClaimCount is what the others count of the cap for it: max(in flight, share), and
	// after its heartbeat expired, until every request it admitted must have ended.
	ClaimCount     int   `json:"claim_count"`
	MaxClockSkewMs int64 `json:"max_clock_skew_ms"` // the allowance it runs with
	// IsFenced: it admits nothing (FenceReason: heartbeat_late, clock_skewed); its
	// requests fail closed as when TiKV is unreachable.
	IsFenced    bool   `json:"is_fenced"`
	FenceReason string `json:"fence_reason"`
}

// ClusterDomain is one domain's cluster-wide record in downloader:domain_runtime.
type ClusterDomain struct {
	Domain         string    `json:"domain"`
	MinIntervalMs  int64     `json:"min_interval_ms"`
	IntervalSource string    `json:"interval_source"`
	LastRequestAt  time.Time `json:"last_request_at"`
	// LastInstanceID set LastRequestAt ("" for the loss marker).
	LastInstanceID string `json:"last_instance_id"`
	// InFlightCount counts the requests admitted on live instances and not finished; a
	// dead instance's requests no longer count (their entries expire on their own).
	InFlightCount int `json:"in_flight_count"`
	// IsStored is false when the domain has no record (never requested, swept or lost):
	// LastRequestAt is then the loss marker's moment.
	IsStored bool `json:"is_stored"`
	// InFlightRequests are the record's entries not yet expired, of every instance.
	InFlightRequests []ClusterInFlight `json:"in_flight_requests"`
}

// ClusterInFlight is one admitted request not yet written back.
type ClusterInFlight struct {
	InstanceID string    `json:"instance_id"`
	SlotAt     time.Time `json:"slot_at"`
	// WireAt is when it went on the wire, once its instance wrote that back; nil before.
	WireAt    *time.Time `json:"wire_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	// IsInstanceLive is false when its instance's heartbeat expired: the entry holds the
	// domain until it expires, but no longer counts in in_flight_count.
	IsInstanceLive bool `json:"is_instance_live"`
}

// Fence reasons (fence_reason): why an instance admits nothing. The instance list shows
// the first two (what the others can see of an instance); an instance's own FenceState
// may also say it has not registered yet or that another process took its id over.
const (
	FenceHeartbeatLate       = "heartbeat_late"         // its lease ends before its next heartbeat committed
	FenceClockSkewed         = "clock_skewed"           // its clock cannot be bounded within the allowance
	FenceNotRegistered       = "not_registered"         // no heartbeat committed yet (starting)
	FenceInstanceIDTakenOver = "instance_id_taken_over" // another process runs under its id: stop it
)

// FenceReasons lists the fence reasons, a closed set (the metrics' fence_reason label).
func FenceReasons() []string {
	return []string{FenceHeartbeatLate, FenceClockSkewed, FenceNotRegistered, FenceInstanceIDTakenOver}
}

// FenceState is whether this instance admits nothing now, and why (one of FenceReasons;
// "" when not fenced).
type FenceState struct {
	IsFenced    bool   `json:"is_fenced"`
	FenceReason string `json:"fence_reason"`
}

// Fencer is a shared runtime that can be fenced from its cluster (store/tikv's Runtime).
// FenceState reads local state only: it is cheap enough for every metrics scrape.
type Fencer interface {
	FenceState(now time.Time) FenceState
}

// Cluster returns the cluster view of the shared runtime, or nil on one machine.
func (e *Engine) Cluster() ClusterView {
	cv, _ := e.cfg.Shared.(ClusterView)
	return cv
}

// EgressState is our own network's state as the egress detector sees it (package egress):
// IsUnavailable while it classifies failures as egress_unavailable.
type EgressState struct {
	IsUnavailable bool `json:"is_unavailable"`
	// UnavailableSinceAt is when the outage began; nil while the egress works.
	UnavailableSinceAt *time.Time `json:"unavailable_since_at"`
	// FailingDomainCount counts the distinct domains that failed at the network level in
	// the detector's window (entries A and B); SeenDomainCount those seen either way.
	FailingDomainCount int  `json:"failing_domain_count"`
	SeenDomainCount    int  `json:"seen_domain_count"`
	HasCanary          bool `json:"has_canary"`
	IsCanaryOK         bool `json:"is_canary_ok"`
}

// egressStatuser is the egress detector's snapshot (egress.Detector).
type egressStatuser interface {
	Status(now time.Time) egress.Status
}

// Egress returns the egress detector's state at now; ok is false without a detector.
func (e *Engine) Egress(now time.Time) (st EgressState, ok bool) {
	d, ok := e.cfg.Egress.(egressStatuser)
	if !ok {
		return EgressState{}, false
	}
	return EgressStateOf(d.Status(now)), true
}

// EgressStateOf is the egress detector's status as the API, the console and the metrics
// show it.
func EgressStateOf(s egress.Status) EgressState {
	st := EgressState{IsUnavailable: s.IsDown, FailingDomainCount: s.FailingDomainCount, SeenDomainCount: s.SeenDomainCount,
		HasCanary: s.HasCanary, IsCanaryOK: s.IsCanaryOK}
	if s.IsDown && !s.DownSinceAt.IsZero() {
		at := s.DownSinceAt.UTC()
		st.UnavailableSinceAt = &at
	}
	return st
}

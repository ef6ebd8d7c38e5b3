package downloader

import (
	"context"
	"time"
)

// The vocabulary of cluster mode (SPEC §2, one limiter for several machines): the shared
// downloader:domain_runtime the engine consults (store/tikv implements it), and the views
// of the cluster and of the egress the API, the console and the metrics show. It lives in
// the root so that the store, the engine and the HTTP faces share it without importing
// one another.

// SharedRuntime is downloader:domain_runtime shared by several downloader instances
// (cluster mode: store/tikv.Runtime), so that a domain's interval holds across all of them
// and all three entries. The engine consults it after the local limiter admitted a request
// (a local refusal is the fast path and asks it nothing) and after the global cap gave a
// slot, right before the request runs. With Config.Shared nil nothing changes.
// Implementations are safe for concurrent use.
type SharedRuntime interface {
	// Admit takes domain's cluster-wide admission for one request decided at r.Now. It
	// returns a ticket when admitted, with the delay until the request's slot (0 unless
	// r.Reserve); or no ticket and the wait after which asking again may succeed; or an
	// error when the shared state cannot be reached: then the request must not be sent
	// (fail closed).
	Admit(ctx context.Context, r SharedAdmit) (SharedTicket, time.Duration, error)
	// MaxConcurrentCount returns the cluster-wide max_concurrent_count in force.
	MaxConcurrentCount() int
	// ApplyMaxConcurrentCount applies a cluster-wide max_concurrent_count that was just
	// stored through this instance: this instance's share of it takes effect at once.
	ApplyMaxConcurrentCount(n int)
}

// SharedAdmit is one admission asked of the SharedRuntime.
type SharedAdmit struct {
	Domain         string
	MinInterval    time.Duration
	IntervalSource IntervalSource
	Entry          Entry
	Now            time.Time
	// Reserve lets a busy domain give a future slot (entry A, redirect hops) rather than
	// a refusal, unless that slot is after Deadline (zero: no deadline).
	Reserve  bool
	Deadline time.Time
	// Timeout bounds the request from its slot: by then it went on the wire or never will.
	Timeout time.Duration
}

// SharedTicket is one admitted request. Wired is called at most once, when the request's
// first bytes went on the wire (the local limiter's OnWire), with that moment; it must not
// block (the write-back is queued: the other instances may space their requests from it
// rather than waiting for the request to end; if it is lost they wait as before). Done is
// called exactly once, when the request ended (sent or not), with wireAt: no earlier than
// the moment the request went on the wire, if it did, and no later than now.
type SharedTicket interface {
	Wired(at time.Time)
	Done(ctx context.Context, wireAt time.Time)
}

// ClusterView is the cluster-wide view of a SharedRuntime that has one (store/tikv's
// Runtime): the instances and a domain's shared record. The engine's wiring hands it to the API and the console.
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

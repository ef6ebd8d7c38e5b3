package downloader

import "time"

// The views of the limiter's table, downloader:domain_runtime (SPEC §2), as the limiter
// reports them and the runtime API, the console and the metrics show them.

// RateState is the rate-limit state of a domain shown by the console and the runtime API. It
// is not domain health, which only the scheduler knows.
type RateState string

const (
	RateStateNormal     RateState = "normal"       // 正常
	RateStateOverLimitA RateState = "over_limit_a" // 入口 A 超限 (a task was delayed)
	RateStateOverLimitB RateState = "over_limit_b" // 入口 B 超限 (a render got 429)
	RateStateOverLimitC RateState = "over_limit_c" // 入口 C 超限 (a probe was refused)
)

// DomainState is a snapshot of one domain's entry in downloader:domain_runtime.
type DomainState struct {
	Domain         string         `json:"domain"`
	MinIntervalMs  int64          `json:"min_interval_ms"`
	IntervalSource IntervalSource `json:"interval_source"`
	// LastRequestAt is the latest request's moment: when it went on the wire, or the slot
	// it was admitted for while it has not gone out yet (a reservation's slot may be
	// ahead). It is never a moment at which no request was made (SPEC §2, loss and
	// rebuild): zero, and absent from the JSON, when no request of the domain is known.
	LastRequestAt time.Time `json:"last_request_at,omitzero"`
	// RebuildLossAt is set while the conservative rebuild decides the domain's next slot:
	// the moment of the table's loss (the previous process's last sign of life after a
	// crash), which counts as the domain's last request, so that a request is admitted
	// from RebuildLossAt + its min_interval_ms. Zero (absent) otherwise.
	RebuildLossAt time.Time `json:"rebuild_loss_at,omitzero"`
	// HoldUntilAt is the end of the origin's own wait while it holds the domain (a 429 or
	// 503 with Retry-After: no request on any entry before it); zero (absent) otherwise.
	HoldUntilAt     time.Time `json:"hold_until_at,omitzero"`
	InFlightCount   int       `json:"in_flight_count"`
	Request24hCount uint64    `json:"request_24h_count"`
	State           RateState `json:"state"`
	// LastOverLimitEntry and LastOverLimitAt tell the latest over-limit event, if any.
	LastOverLimitEntry Entry      `json:"last_over_limit_entry,omitempty"`
	LastOverLimitAt    *time.Time `json:"last_over_limit_at"`
}

// RuntimeStats are the limiter's service-wide numbers of the domain runtime page.
type RuntimeStats struct {
	DomainCount     int    `json:"domain_count"`
	InFlightCount   int    `json:"in_flight_count"`
	Request24hCount uint64 `json:"request_24h_count"`
	// Trigger24hCount counts over-limit events per entry over the last 24 hours.
	Trigger24hCount map[Entry]uint64 `json:"trigger_24h_count"`
}

// SavedDomain is one domain's entry as a clean stop keeps it: the state that decides its
// next admission, and what the console shows of its interval.
type SavedDomain struct {
	Domain string
	// LastRequestAt is what the next interval counts from: the latest admitted slot or
	// wire moment, or the loss moment (RuntimeSnapshot.LossAt) for a domain the lost
	// table knew.
	LastRequestAt time.Time
	// WireAt is the latest request's moment on the wire (or its admission to go out at
	// once); zero when no request is known.
	WireAt         time.Time
	MinIntervalMs  int64
	IntervalSource IntervalSource // "" when no request was admitted
	// InFlightCount counts requests still in flight at the save: they may send until the
	// save, so the restore counts the domain as requested at RuntimeSnapshot.SavedAt.
	InFlightCount int
	// HoldUntil is the end of the origin's own wait (limiter/hold.go) still in force at the save;
	// zero when there is none.
	HoldUntil time.Time
}

// RuntimeSnapshot is the part of the limiter's table that can still refuse a request, as
// a clean stop saves it and the next start restores it (SPEC §2, loss and rebuild).
// Entries that cannot (nothing in flight and the largest accepted interval passed since
// their last request) are left out: they would admit any request anyway.
type RuntimeSnapshot struct {
	SavedAt time.Time
	// LossAt is the table's latest loss while it can still refuse a request: a domain
	// with no entry counts as requested at it. Zero when there is none.
	LossAt  time.Time
	Entries []SavedDomain
}

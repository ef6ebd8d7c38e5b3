// Package egress tells our own network failing from the sites failing (SPEC §4: our own failures are not the sites').
//
// When connect_timeout, connect_refused, connection_reset or resolver failures hit many
// distinct domains at the same moment, it is far likelier that our egress (uplink, NAT,
// firewall, resolver) is down than that every site went down together. Blaming the sites
// then would make the scheduler back every one of them off, and one outage of ours would
// double every paused domain's recovery time across the library. While the Detector says
// our egress is down, those failures are reported as egress_unavailable
// (has_reached_origin=false) instead.
//
// The rule (docs/reliability.md has the reasoning and the numbers):
//
//   - Each outcome counts for its domain: failing when it is a network-level failure
//     (connect_timeout, connect_refused, connection_reset, resolver_unavailable); working
//     when the network path demonstrably worked (any HTTP answer, success, tls_failed,
//     response_timeout, domain_not_found, destination_forbidden); our own reasons
//     (self_rate_limited, renderer_*, shutting_down, ...) do not count.
//   - A probe's failure (entry C) is no evidence on its own: the scheduler probes the
//     domains it paused for failing, so probe failures are expected, and counting them
//     would make a recovery round of probes look like our outage and stall the recovery
//     it is for. It counts only towards the canary's lower bar. A probe that works counts
//     as working.
//   - Only a domain's latest outcome within Window counts, so one dead site tried a
//     hundred times is one failing domain, and a site that came back is working.
//   - Suspected: at least MinDomainCount distinct domains failing, and they are at least
//     MinFailingShare of the distinct domains seen in the window.
//   - Without a canary, down = suspected. With one (Config.Canary, checked every
//     CanaryInterval by Run): a fresh canary success vetoes (our path works: the sites
//     really are down), and a fresh canary failure lowers the bar to
//     CanaryMinDomainCount failing domains, probes included (any share). Down =
//     (suspected or (canary failing and failing ≥ CanaryMinDomainCount)) and not (canary
//     fresh and working).
//   - While down, a failing outcome's reason becomes egress_unavailable, except
//     resolver_unavailable, which already says has_reached_origin=false and names the
//     part that failed more precisely. Everything else keeps its reason.
//
// The outcomes that tipped the detector over (the first MinDomainCount-1 failures) keep
// their own reason: detection needs evidence, and that is its price.
package egress

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"downloader"
	"downloader/clock"
)

// Defaults of Config.
const (
	DefaultWindow               = 30 * time.Second
	DefaultMinDomainCount       = 8
	DefaultMinFailingShare      = 0.8
	DefaultCanaryInterval       = 10 * time.Second
	DefaultCanaryTimeout        = 5 * time.Second
	DefaultCanaryMinDomainCount = 2
)

// Config configures a Detector. Zero values take the defaults above.
type Config struct {
	Clock  clock.Clock  // default clock.Real{}; Run's canary schedule uses it
	Logger *slog.Logger // default: discard

	// Window is how long an outcome counts for its domain.
	Window time.Duration
	// MinDomainCount is how many distinct domains must be failing at network level.
	MinDomainCount int
	// MinFailingShare is the least share of the distinct domains seen in the window that
	// must be failing (0 < share ≤ 1).
	MinFailingShare float64

	// Canary, when set, checks a target that should always answer (a TCP connect to a
	// stable host of the operator's choice, say). It is called by Run, never by Judge.
	Canary func(ctx context.Context) error
	// CanaryInterval is how often Run checks the canary; a result older than twice this
	// is stale and ignored.
	CanaryInterval time.Duration
	// CanaryTimeout bounds one canary check.
	CanaryTimeout time.Duration
	// CanaryMinDomainCount is how many failing domains suffice while the canary fails.
	CanaryMinDomainCount int
}

// Detector is the rolling window over distinct domains. Safe for concurrent use; the
// zero value is not usable: create it with New.
type Detector struct {
	cfg Config
	log *slog.Logger

	mu         sync.Mutex
	domains    map[string]domainState // latest counting outcome per domain, within the window
	events     []event                // observations in time order, for expiry
	head       int                    // events[:head] are expired
	counts     [kindCount]int         // domains by the kind of their latest outcome
	isDown     bool
	downSince  time.Time
	canary     canaryState
	wakeCanary chan struct{} // asks Run for an early canary check
}

type domainState struct {
	at   time.Time
	kind kind
}

type event struct {
	domain string
	at     time.Time
}

type canaryState struct {
	at   time.Time // zero: never checked
	isOK bool
	err  string
}

// New returns a detector for cfg.
func New(cfg Config) *Detector {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MinDomainCount <= 0 {
		cfg.MinDomainCount = DefaultMinDomainCount
	}
	if cfg.MinFailingShare <= 0 || cfg.MinFailingShare > 1 {
		cfg.MinFailingShare = DefaultMinFailingShare
	}
	if cfg.CanaryInterval <= 0 {
		cfg.CanaryInterval = DefaultCanaryInterval
	}
	if cfg.CanaryTimeout <= 0 {
		cfg.CanaryTimeout = DefaultCanaryTimeout
	}
	if cfg.CanaryMinDomainCount <= 0 {
		cfg.CanaryMinDomainCount = DefaultCanaryMinDomainCount
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Detector{cfg: cfg, log: log.With("component", "egress"), domains: make(map[string]domainState),
		wakeCanary: make(chan struct{}, 1)}
}

// kind is what an outcome says about our network.
type kind int

const (
	kindIgnored      kind = iota // our own reasons: says nothing about the network
	kindFailing                  // a network-level failure
	kindProbeFailing             // a network-level failure of a probe: expected, no evidence alone
	kindWorking                  // the network path to the origin worked
	kindCount
)

func kindOf(entry downloader.Entry, reason downloader.FailReason, hasResponse bool) kind {
	if hasResponse {
		return kindWorking
	}
	switch reason {
	case downloader.FailConnectTimeout, downloader.FailConnectRefused, downloader.FailConnectionReset,
		downloader.FailResolverUnavailable:
		if entry == downloader.EntryProbe {
			return kindProbeFailing
		}
		return kindFailing
	case "", downloader.FailHTTPStatusError, downloader.FailTLSFailed, downloader.FailResponseTimeout,
		downloader.FailDomainNotFound, downloader.FailDestinationForbidden:
		return kindWorking
	}
	return kindIgnored
}

// Judge records the outcome of one request to domain at now through entry (reason "" is
// success; hasResponse says an HTTP answer arrived) and returns the reason to report:
// reason itself, or egress_unavailable when it is a network-level failure while our egress
// is down (see the package doc).
func (d *Detector) Judge(now time.Time, domain string, entry downloader.Entry, reason downloader.FailReason, hasResponse bool) downloader.FailReason {
	k := kindOf(entry, reason, hasResponse)
	d.mu.Lock()
	d.expireLocked(now)
	if k != kindIgnored {
		d.recordLocked(now, domain, k)
	}
	down := d.updateLocked(now)
	wantCanary := d.cfg.Canary != nil && !down && d.suspectedLocked() && !d.canaryFreshLocked(now)
	d.mu.Unlock()
	if wantCanary {
		select {
		case d.wakeCanary <- struct{}{}:
		default:
		}
	}
	if down && (k == kindFailing || k == kindProbeFailing) && reason != downloader.FailResolverUnavailable {
		return downloader.FailEgressUnavailable
	}
	return reason
}

// recordLocked requires d.mu held.
func (d *Detector) recordLocked(now time.Time, domain string, k kind) {
	if old, ok := d.domains[domain]; ok {
		d.counts[old.kind]--
	}
	d.counts[k]++
	d.domains[domain] = domainState{at: now, kind: k}
	d.events = append(d.events, event{domain: domain, at: now})
}

// expireLocked drops outcomes older than the window. Requires d.mu held.
func (d *Detector) expireLocked(now time.Time) {
	cutoff := now.Add(-d.cfg.Window)
	for d.head < len(d.events) && !d.events[d.head].at.After(cutoff) {
		ev := d.events[d.head]
		d.events[d.head] = event{}
		d.head++
		st, ok := d.domains[ev.domain]
		if !ok || !st.at.Equal(ev.at) {
			continue // a later outcome of the domain is still in the window
		}
		delete(d.domains, ev.domain)
		d.counts[st.kind]--
	}
	// Compact once the expired prefix is at least half of the slice.
	if d.head > 0 && d.head*2 >= len(d.events) {
		n := copy(d.events, d.events[d.head:])
		clear(d.events[n:])
		d.events = d.events[:n]
		d.head = 0
	}
}

// failingLocked counts the failing domains that are evidence; seenLocked the domains that
// are evidence either way. Require d.mu held.
func (d *Detector) failingLocked() int { return d.counts[kindFailing] }
func (d *Detector) seenLocked() int    { return d.counts[kindFailing] + d.counts[kindWorking] }

// suspectedLocked: enough distinct failing domains, and a large enough share. Requires d.mu.
func (d *Detector) suspectedLocked() bool {
	failing := d.failingLocked()
	return failing >= d.cfg.MinDomainCount && float64(failing) >= d.cfg.MinFailingShare*float64(d.seenLocked())
}

// canaryFreshLocked requires d.mu held.
func (d *Detector) canaryFreshLocked(now time.Time) bool {
	return !d.canary.at.IsZero() && now.Sub(d.canary.at) <= 2*d.cfg.CanaryInterval
}

// updateLocked decides down-ness at now and logs a change. Requires d.mu held.
func (d *Detector) updateLocked(now time.Time) bool {
	down := d.suspectedLocked()
	if d.cfg.Canary != nil && d.canaryFreshLocked(now) {
		if d.canary.isOK {
			down = false
		} else if d.failingLocked()+d.counts[kindProbeFailing] >= d.cfg.CanaryMinDomainCount {
			down = true
		}
	}
	if down != d.isDown {
		d.isDown = down
		if down {
			d.downSince = now
			d.log.Warn("egress looks down: network failures on many distinct domains are reported as egress_unavailable",
				"failing_domain_count", d.failingLocked(), "seen_domain_count", d.seenLocked(),
				"probe_failing_domain_count", d.counts[kindProbeFailing], "canary_error", d.canary.err)
		} else {
			d.log.Info("egress looks up again", "down_ms", now.Sub(d.downSince).Milliseconds(),
				"failing_domain_count", d.failingLocked(), "seen_domain_count", d.seenLocked())
			d.downSince = time.Time{}
		}
	}
	return down
}

// Status is a snapshot for logs, metrics and the console.
type Status struct {
	IsDown             bool      `json:"is_down"`
	DownSinceAt        time.Time `json:"down_since_at,omitzero"`
	FailingDomainCount int       `json:"failing_domain_count"` // evidence: entries A and B
	SeenDomainCount    int       `json:"seen_domain_count"`    // evidence either way
	// ProbeFailingDomainCount counts domains whose latest outcome is a failed probe.
	ProbeFailingDomainCount int       `json:"probe_failing_domain_count"`
	HasCanary               bool      `json:"has_canary"`
	IsCanaryOK              bool      `json:"is_canary_ok"`
	CanaryCheckedAt         time.Time `json:"canary_checked_at,omitzero"`
	CanaryError             string    `json:"canary_error,omitempty"`
}

// Status returns the detector's state at now.
func (d *Detector) Status(now time.Time) Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expireLocked(now)
	d.updateLocked(now)
	return Status{IsDown: d.isDown, DownSinceAt: d.downSince, FailingDomainCount: d.failingLocked(), SeenDomainCount: d.seenLocked(),
		ProbeFailingDomainCount: d.counts[kindProbeFailing],
		HasCanary:               d.cfg.Canary != nil, IsCanaryOK: d.canary.isOK, CanaryCheckedAt: d.canary.at, CanaryError: d.canary.err}
}

// CheckCanary runs the canary once (bounded by CanaryTimeout) and records its result. It
// does nothing without a canary. Run calls it; tests may call it directly.
func (d *Detector) CheckCanary(ctx context.Context) {
	if d.cfg.Canary == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, d.cfg.CanaryTimeout)
	err := d.cfg.Canary(cctx)
	cancel()
	if ctx.Err() != nil {
		return // we are stopping: the failure is ours to ignore
	}
	now := d.cfg.Clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	wasOK, first := d.canary.isOK, d.canary.at.IsZero()
	d.canary = canaryState{at: now, isOK: err == nil}
	if err != nil {
		d.canary.err = err.Error()
	}
	if first || wasOK != d.canary.isOK {
		if err != nil {
			d.log.Warn("egress canary fails", "error", err)
		} else {
			d.log.Info("egress canary answers")
		}
	}
	d.expireLocked(now)
	d.updateLocked(now)
}

// Run checks the canary every CanaryInterval, and at once when the window suspects an
// outage and the last check is stale, until ctx ends. Without a canary it only waits. It
// returns nil when ctx ends.
func (d *Detector) Run(ctx context.Context) error {
	if d.cfg.Canary == nil {
		<-ctx.Done()
		return nil
	}
	for {
		d.CheckCanary(ctx)
		t := d.cfg.Clock.NewTimer(d.cfg.CanaryInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		case <-d.wakeCanary:
			t.Stop()
		}
	}
}

// EgressState is s as the API, the console and the metrics show it.
func (s Status) EgressState() downloader.EgressState {
	st := downloader.EgressState{IsUnavailable: s.IsDown, FailingDomainCount: s.FailingDomainCount, SeenDomainCount: s.SeenDomainCount,
		HasCanary: s.HasCanary, IsCanaryOK: s.IsCanaryOK}
	if s.IsDown && !s.DownSinceAt.IsZero() {
		at := s.DownSinceAt.UTC()
		st.UnavailableSinceAt = &at
	}
	return st
}

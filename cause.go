package downloader

import "strconv"

// Cause is what ended a fetch or render, as the fetcher or renderer saw it: which step
// failed, not yet what the scheduler is told. SPEC §4's fail_reason is decided from it
// once, by DecideFailReason (with what only the caller knows: whether the service is
// stopping, whether a refused hop was refused by the shared state) and then the egress
// verdict (package engine runs both, in one place). The set is closed: every cause has a
// row in causeReasons and a stable name in causeNames.
//
// The zero value, CauseReported, says that no cause was given: the outcome's FailReason
// stands as it was set. The fetcher and the renderer never leave it on a failure (their
// classifier tests check it); it is kept for test doubles, and for the outcomes the engine
// and the server make themselves without fetching (Failed: shutting_down before the
// request went, invalid_task, runtime_store_unavailable).
type Cause uint8

const (
	CauseReported   Cause = iota // no cause given: Outcome.FailReason as set
	CauseOK                      // a 2xx answer
	CauseHTTPStatus              // the origin (or its gateway) answered non-2xx
	// The network path, on the origin's side (has_reached_origin=true).
	CauseDomainNotFound       // NXDOMAIN, or a name with no address
	CauseDestinationForbidden // the SSRF guard refused the address a name or redirect gave
	CauseConnectRefused
	CauseConnectTimeout
	CauseTLSFailed
	CauseResponseTimeout // no headers in time, a stalled body
	CauseConnectionReset // reset, EOF, a malformed answer, a second send refused
	// Our side (has_reached_origin=false).
	CauseResolverFailed       // our resolver failed (SERVFAIL, timeout, unreachable), not an NXDOMAIN answer
	CauseOutOfResources       // our descriptors, buffers or memory ran out (EMFILE, ENOBUFS, ...)
	CauseQueueFull            // the renderer's slots and queue were full
	CauseCancelled            // the caller gave up, or the fetcher or pool is closing
	CauseWireWaitFailed       // the limiter's wait at the wire ended before the request could go
	CauseHopRefused           // a redirect hop (a later main document) was not admitted in time
	CauseHopSharedUnavailable // a hop's shared admission could not reach the shared state (cluster mode)
	CauseInvalidURL           // the URL cannot be requested
	CauseRendererUnavailable  // the renderer cannot start or be reached
	CauseRendererCrashed      // the browser or its tab died mid-render
	CauseRenderTimeout        // the render did not finish in time
	// CauseEgressProxyFailed: the operator's egress proxy is down or refused us (no
	// connection to it, a 407, a failed SOCKS5 authentication, a refusal by its rules, a
	// broken answer): no packet of ours reached the origin (docs/egress-proxy.md).
	CauseEgressProxyFailed
)

// causeReasons is the one table from causes to SPEC §4's closed set: the reason a cause
// means when nothing else is known (DecideFailReason adds the rest).
var causeReasons = [...]FailReason{
	CauseReported:             "",
	CauseOK:                   "",
	CauseHTTPStatus:           FailHTTPStatusError,
	CauseDomainNotFound:       FailDomainNotFound,
	CauseDestinationForbidden: FailDestinationForbidden,
	CauseConnectRefused:       FailConnectRefused,
	CauseConnectTimeout:       FailConnectTimeout,
	CauseTLSFailed:            FailTLSFailed,
	CauseResponseTimeout:      FailResponseTimeout,
	CauseConnectionReset:      FailConnectionReset,
	CauseResolverFailed:       FailResolverUnavailable,
	CauseOutOfResources:       FailLocalQueueFull, // the origin was never reached and must not be blamed
	CauseQueueFull:            FailLocalQueueFull,
	CauseCancelled:            FailShuttingDown, // the caller's side gave up: ours
	CauseWireWaitFailed:       FailSelfRateLimited,
	CauseHopRefused:           FailSelfRateLimited,
	CauseHopSharedUnavailable: FailRuntimeStoreUnavailable, // cluster mode fails closed
	CauseInvalidURL:           FailInvalidTask,
	CauseRendererUnavailable:  FailRendererUnavailable,
	CauseRendererCrashed:      FailRendererCrashed,
	CauseRenderTimeout:        FailRenderTimeout,
	CauseEgressProxyFailed:    FailEgressUnavailable, // our own egress, as the detector's verdict
}

// causeNames are the causes' stable names (snake_case, SPEC §7), for where a cause is
// carried as text: the renderer's proxy marks its own answers with one (render's
// proxyErrorHeader) and the render reads the cause back from it. A name, once given, is
// never reused for another cause.
var causeNames = [...]string{
	CauseReported:             "reported",
	CauseOK:                   "ok",
	CauseHTTPStatus:           "http_status",
	CauseDomainNotFound:       "domain_not_found",
	CauseDestinationForbidden: "destination_forbidden",
	CauseConnectRefused:       "connect_refused",
	CauseConnectTimeout:       "connect_timeout",
	CauseTLSFailed:            "tls_failed",
	CauseResponseTimeout:      "response_timeout",
	CauseConnectionReset:      "connection_reset",
	CauseResolverFailed:       "resolver_failed",
	CauseOutOfResources:       "out_of_resources",
	CauseQueueFull:            "queue_full",
	CauseCancelled:            "cancelled",
	CauseWireWaitFailed:       "wire_wait_failed",
	CauseHopRefused:           "hop_refused",
	CauseHopSharedUnavailable: "hop_shared_unavailable",
	CauseInvalidURL:           "invalid_url",
	CauseRendererUnavailable:  "renderer_unavailable",
	CauseRendererCrashed:      "renderer_crashed",
	CauseRenderTimeout:        "render_timeout",
	CauseEgressProxyFailed:    "egress_proxy_failed",
}

// String is c's stable name (causeNames); a value outside the set is "cause(N)", which
// ParseCause does not accept.
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return "cause(" + strconv.Itoa(int(c)) + ")"
}

// ParseCause is the cause named s (Cause.String), and whether s names one.
func ParseCause(s string) (Cause, bool) {
	for c, name := range causeNames {
		if name == s {
			return Cause(c), true
		}
	}
	return CauseReported, false
}

// Causes lists the closed set in the order of its values, CauseReported first.
func Causes() []Cause {
	cs := make([]Cause, len(causeReasons))
	for i := range cs {
		cs[i] = Cause(i)
	}
	return cs
}

// IsFailure reports whether c is a failure's cause: neither CauseReported (no cause
// given) nor CauseOK.
func (c Cause) IsFailure() bool { return c != CauseReported && c != CauseOK }

// FailReason is the reason c means on its own (CauseReported and CauseOK: none).
func (c Cause) FailReason() FailReason {
	if int(c) < len(causeReasons) {
		return causeReasons[c]
	}
	return FailConnectionReset // cannot happen: a cause outside the table is a failure on the path
}

// FailContext is what the caller of a fetch or render knows that the fetcher or renderer
// does not.
type FailContext struct {
	// IsStopping: the service is stopping; a request it cut short did not fail on the
	// origin's side.
	IsStopping bool
	// IsHopSharedUnavailable: a hop of the request was refused because the shared limiter
	// state could not be reached (cluster mode). The renderer reports any refused hop as
	// our limiter's refusal; this one was not.
	IsHopSharedUnavailable bool
}

// DecideFailReason is SPEC §4's fail_reason of an outcome: the cause's reason (or, for
// CauseReported, the reason the producer set), then what the caller knows. The egress
// verdict comes after it (engine.EgressJudge): it needs this reason to judge.
func DecideFailReason(o *Outcome, k FailContext) FailReason {
	reason := o.FailReason
	if o.Cause != CauseReported {
		reason = o.Cause.FailReason()
	}
	switch {
	case reason == "":
		return ""
	case k.IsStopping && o.HTTPStatus == 0:
		return FailShuttingDown // cut short by our own stop
	case reason == FailSelfRateLimited && k.IsHopSharedUnavailable:
		return FailRuntimeStoreUnavailable
	}
	return reason
}

// FailedBy returns an outcome that carries only a cause (and the reason it means).
func FailedBy(c Cause) *Outcome {
	o := &Outcome{}
	o.Fail(c)
	return o
}

// Fail sets o's cause and the reason it means on its own, for the fetcher's and renderer's
// own callers (tests, robots.txt); the engine decides again with DecideFailReason.
func (o *Outcome) Fail(c Cause) {
	o.Cause = c
	o.FailReason = c.FailReason()
}

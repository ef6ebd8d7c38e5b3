package downloader

import (
	"strconv"
	"strings"
	"testing"
)

// TestCauseReasons: every cause means one reason of the closed set, and causes on our
// side never count as reaching the origin (SPEC §4).
func TestCauseReasons(t *testing.T) {
	tests := []struct {
		cause Cause
		want  FailReason
	}{
		{CauseReported, ""},
		{CauseOK, ""},
		{CauseHTTPStatus, FailHTTPStatusError},
		{CauseDomainNotFound, FailDomainNotFound},
		{CauseDestinationForbidden, FailDestinationForbidden},
		{CauseConnectRefused, FailConnectRefused},
		{CauseConnectTimeout, FailConnectTimeout},
		{CauseTLSFailed, FailTLSFailed},
		{CauseResponseTimeout, FailResponseTimeout},
		{CauseConnectionReset, FailConnectionReset},
		{CauseResolverFailed, FailResolverUnavailable},
		{CauseOutOfResources, FailLocalQueueFull},
		{CauseQueueFull, FailLocalQueueFull},
		{CauseCancelled, FailShuttingDown},
		{CauseWireWaitFailed, FailSelfRateLimited},
		{CauseHopRefused, FailSelfRateLimited},
		{CauseHopSharedUnavailable, FailRuntimeStoreUnavailable},
		{CauseInvalidURL, FailInvalidTask},
		{CauseRendererUnavailable, FailRendererUnavailable},
		{CauseRendererCrashed, FailRendererCrashed},
		{CauseRenderTimeout, FailRenderTimeout},
		{CauseEgressProxyFailed, FailEgressUnavailable},
	}
	if len(tests) != len(causeReasons) {
		t.Fatalf("%d causes tested, the table has %d", len(tests), len(causeReasons))
	}
	for _, tt := range tests {
		if got := tt.cause.FailReason(); got != tt.want {
			t.Errorf("cause %d means %q, want %q", tt.cause, got, tt.want)
		}
		if !tt.want.IsValid() {
			t.Errorf("cause %d means %q, outside the closed set", tt.cause, tt.want)
		}
	}
	for _, c := range []Cause{CauseResolverFailed, CauseOutOfResources, CauseQueueFull, CauseCancelled, CauseWireWaitFailed,
		CauseHopRefused, CauseHopSharedUnavailable, CauseInvalidURL, CauseRendererUnavailable, CauseRendererCrashed, CauseRenderTimeout} {
		if c.FailReason().HasReachedOrigin() {
			t.Errorf("cause %d (%s) is ours: it must not count as reaching the origin", c, c.FailReason())
		}
	}
}

// TestDecideFailReason: the one decision from an outcome's cause and what the caller
// knows.
func TestDecideFailReason(t *testing.T) {
	stopping := FailContext{IsStopping: true}
	hopShared := FailContext{IsHopSharedUnavailable: true}
	tests := []struct {
		name string
		out  Outcome
		k    FailContext
		want FailReason
	}{
		{"success", Outcome{HTTPStatus: 200, Cause: CauseOK}, FailContext{}, ""},
		{"success while stopping", Outcome{HTTPStatus: 200, Cause: CauseOK}, stopping, ""},
		{"the cause decides", Outcome{Cause: CauseConnectRefused}, FailContext{}, FailConnectRefused},
		{"the cause wins over a reported reason", Outcome{Cause: CauseConnectRefused, FailReason: FailConnectionReset}, FailContext{}, FailConnectRefused},
		{"reported stands", Outcome{FailReason: FailRendererCrashed}, FailContext{}, FailRendererCrashed},
		{"cut short by our stop", Outcome{Cause: CauseConnectTimeout}, stopping, FailShuttingDown},
		{"reported, cut short by our stop", Outcome{FailReason: FailRenderTimeout}, stopping, FailShuttingDown},
		{"an answer while stopping stays", Outcome{HTTPStatus: 503, Cause: CauseHTTPStatus}, stopping, FailHTTPStatusError},
		{"a hop refused by the shared state", Outcome{FailReason: FailSelfRateLimited}, hopShared, FailRuntimeStoreUnavailable},
		{"a hop refused by our limit", Outcome{Cause: CauseHopRefused}, FailContext{}, FailSelfRateLimited},
		{"fetch's own shared refusal", Outcome{Cause: CauseHopSharedUnavailable}, FailContext{}, FailRuntimeStoreUnavailable},
		{"other failures keep their reason", Outcome{Cause: CauseTLSFailed}, hopShared, FailTLSFailed},
		{"stopping wins over the hop", Outcome{Cause: CauseHopRefused}, FailContext{IsStopping: true, IsHopSharedUnavailable: true}, FailShuttingDown},
	}
	for _, tt := range tests {
		if got := DecideFailReason(&tt.out, tt.k); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestCauseNames: every cause has one stable snake_case name that parses back to it (the
// renderer's proxy carries causes by name), and nothing else parses.
func TestCauseNames(t *testing.T) {
	if len(causeNames) != len(causeReasons) || len(Causes()) != len(causeReasons) {
		t.Fatalf("%d cause names, %d listed, %d causes", len(causeNames), len(Causes()), len(causeReasons))
	}
	seen := map[string]Cause{}
	for i, c := range Causes() {
		if c != Cause(i) {
			t.Errorf("Causes()[%d] = %d", i, c)
		}
		name := c.String()
		if name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz_") != "" || strings.HasPrefix(name, "_") || strings.HasSuffix(name, "_") {
			t.Errorf("cause %d is named %q: want snake_case", i, name)
		}
		if prev, dup := seen[name]; dup {
			t.Errorf("causes %d and %d are both named %q", prev, c, name)
		}
		seen[name] = c
		got, ok := ParseCause(name)
		if !ok || got != c {
			t.Errorf("ParseCause(%q) = %d, %v; want %d, true", name, got, ok, c)
		}
	}
	outside := Cause(len(causeReasons))
	for _, s := range []string{"", "bogus", "Connect_Refused", " connect_refused", outside.String()} {
		if c, ok := ParseCause(s); ok {
			t.Errorf("ParseCause(%q) = %d: want no cause", s, c)
		}
	}
	if got := outside.String(); got != "cause("+strconv.Itoa(len(causeReasons))+")" {
		t.Errorf("a cause outside the set is named %q", got)
	}
}

// TestCauseIsFailure: only CauseReported and CauseOK are not failures, and a failure's
// cause always means a reason.
func TestCauseIsFailure(t *testing.T) {
	for i := range causeReasons {
		c := Cause(i)
		want := c != CauseReported && c != CauseOK
		if c.IsFailure() != want {
			t.Errorf("%s: IsFailure %v, want %v", c, c.IsFailure(), want)
		}
		if c.IsFailure() != (c.FailReason() != "") {
			t.Errorf("%s: IsFailure %v but means %q", c, c.IsFailure(), c.FailReason())
		}
	}
}

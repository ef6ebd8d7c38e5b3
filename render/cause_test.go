package render

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"downloader"
	"downloader/netguard"
	"downloader/render/renderproxy"
)

// isFailureCause reports whether c is a failure's cause that means a reason of SPEC §4's
// closed set: what every render classifier must give (never CauseReported, which would
// leave the reason to whoever set it, nor CauseOK).
func isFailureCause(c downloader.Cause) bool {
	r := c.FailReason()
	return c.IsFailure() && r != "" && r.IsValid()
}

// checkCause fails t unless out, a render's outcome, carries the cause of how it ended
// (CauseOK for a page) and the reason that cause means: the engine decides fail_reason from
// the cause alone.
func checkCause(t *testing.T, out *downloader.Outcome) {
	t.Helper()
	if out.Cause == downloader.CauseReported {
		t.Errorf("render outcome without a cause (fail_reason %q)", out.FailReason)
	} else if got := out.Cause.FailReason(); got != out.FailReason {
		t.Errorf("render outcome with cause %s (%q) but fail_reason %q", out.Cause, got, out.FailReason)
	}
}

// TestRenderClassifiersGiveACause: every classifier of a failed render step gives a
// failure's cause, whatever it is given: the engine then decides fail_reason from the
// cause alone (downloader.DecideFailReason).
func TestRenderClassifiersGiveACause(t *testing.T) {
	errs := []error{
		&netguard.ForbiddenError{Host: "a.test", Reason: "private"},
		&net.DNSError{Err: "no such host", IsNotFound: true},
		&net.DNSError{Err: "server misbehaving", IsTemporary: true},
		&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
		syscall.ECONNRESET, syscall.EPIPE, io.EOF, io.ErrUnexpectedEOF, syscall.ENETUNREACH, syscall.EHOSTUNREACH,
		os.ErrDeadlineExceeded, context.DeadlineExceeded, syscall.ETIMEDOUT,
		renderproxy.ErrNotArmed, errReleased, context.Canceled,
		errors.Join(renderproxy.ErrOriginTLS, errors.New("x509: unknown authority")),
		fmt.Errorf("dial: %w", errors.New("boom")), errors.New(""),
	}
	for _, err := range errs {
		if c := errorCause(err); !isFailureCause(c) {
			t.Errorf("errorCause(%v) = %s", err, c)
		}
		if c := proxyFailureCause(err); !isFailureCause(c) {
			t.Errorf("proxyFailureCause(%v) = %s", err, c)
		}
	}
	if c := proxyFailureCause(errors.Join(renderproxy.ErrOriginTLS, io.EOF)); c != downloader.CauseTLSFailed {
		t.Errorf("our TLS handshake with the origin failed: %s, want tls_failed", c)
	}

	texts := []string{"", "net::ERR_SOMETHING_NEW", "net::ERR_SSL_PROTOCOL_ERROR", "net::ERR_CERT_DATE_INVALID", "ERR_BAD_SSL_CLIENT_AUTH_CERT"}
	for name := range netErrors {
		texts = append(texts, "net::"+name, name)
	}
	for _, text := range texts {
		if c := netErrorCause(text); !isFailureCause(c) {
			t.Errorf("netErrorCause(%q) = %s", text, c)
		}
	}

	msgs := []string{"", "something new", "Server busy: navigation in progress, try again later",
		"Network error: navigation exceeded 30000ms deadline", "Invalid URL: relative URL without a base",
		"Too many redirects (limit 20)", "Network error: tcp connect error: Connection refused (os error 111)",
		"Network error: connection reset by peer", "Network error: operation timed out",
		"Network error: error sending request: invalid peer certificate: UnknownIssuer",
		"Network error: http://a.test/: net::ERR_UNKNOWN_TO_US", "Network error: http://a.test/: net::ERR_ABORTED"}
	for name := range netErrors {
		msgs = append(msgs, "Network error: http://a.test/: net::"+name)
	}
	for _, msg := range msgs {
		for _, proxy := range []downloader.Cause{downloader.CauseReported, downloader.CauseOK} {
			if c := classifyNavigationError(msg, proxy); !isFailureCause(c) {
				t.Errorf("classifyNavigationError(%q, %s) = %s", msg, proxy, c)
			}
		}
	}
	// What our proxy recorded wins: every failure's cause comes through as it is.
	for _, c := range downloader.Causes() {
		if !c.IsFailure() {
			continue
		}
		if got := classifyNavigationError("Network error: net::ERR_CONNECTION_REFUSED", c); got != c {
			t.Errorf("classifyNavigationError with the proxy's %s = %s", c, got)
		}
	}

	for _, ctx := range stoppedContexts() {
		if c := stopCause(ctx); !isFailureCause(c) {
			t.Errorf("stopCause(%v) = %s", context.Cause(ctx), c)
		}
	}
}

// stoppedContexts are contexts ended in each way a render's can end.
func stoppedContexts() []context.Context {
	var ctxs []context.Context
	for _, cause := range []error{nil, errCrashed, errRenderTimeout, context.DeadlineExceeded, errPoolClosed, errHopRefused, errors.New("other")} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		ctxs = append(ctxs, ctx)
	}
	return ctxs
}

// TestProxyMarkCarriesTheCause: our proxy's mark on its own answer carries the cause by
// name, and the render reads back the same cause; a mark without our token is the
// origin's answer (no cause), and a mark that names no failure is a broken answer.
func TestProxyMarkCarriesTheCause(t *testing.T) {
	for _, c := range downloader.Causes() {
		got := renderproxy.MarkCause(renderproxy.Mark("tok", c), "tok")
		switch {
		case c.IsFailure() && got != c:
			t.Errorf("%s marked, %s read back", c, got)
		case !c.IsFailure() && got != downloader.CauseConnectionReset:
			t.Errorf("a mark naming %s (no failure) read as %s, want connection_reset", c, got)
		}
		if got := proxyCauseOf(map[string]any{"X-Downloader-Proxy-Error": renderproxy.Mark("tok", c)}, "tok"); !isFailureCause(got) {
			t.Errorf("%s marked in the browser's headers, read as %s", c, got)
		}
		if got := renderproxy.MarkCause(renderproxy.Mark("tok", c), "other"); got != downloader.CauseReported {
			t.Errorf("%s marked with another token: %s, want none (the origin's answer)", c, got)
		}
	}
	for _, v := range []string{"tok bogus", "tok ", "tok self_rate_limited", "tok cause(200)"} {
		if got := renderproxy.MarkCause(v, "tok"); got != downloader.CauseConnectionReset {
			t.Errorf("mark %q read as %s, want connection_reset", v, got)
		}
	}
	for _, v := range []string{"", "tok", "destination_forbidden"} {
		if got := renderproxy.MarkCause(v, "tok"); got != downloader.CauseReported {
			t.Errorf("header %q read as %s, want none", v, got)
		}
	}
	if got := renderproxy.MarkCause("tok connect_refused", ""); got != downloader.CauseReported {
		t.Errorf("no token of ours: %s, want none", got)
	}
}

// TestStoppedGivesACause: a render step that could not go on gives the cause of why,
// from how its context ended and what is left of the browser and the tab, each the
// reason SPEC §4 gives it.
func TestStoppedGivesACause(t *testing.T) {
	type state struct{ isBrowserLost, isDetached, isCrashed, isTabGone, isPoolClosed bool }
	tests := []struct {
		name  string
		cause error // how runCtx ended; nil: it has not
		st    state
		err   error
		want  downloader.FailReason
	}{
		{"crashed", errCrashed, state{}, nil, downloader.FailRendererCrashed},
		{"timed out", errRenderTimeout, state{}, nil, downloader.FailRenderTimeout},
		{"deadline", context.DeadlineExceeded, state{}, nil, downloader.FailRenderTimeout},
		{"pool closed", errPoolClosed, state{}, nil, downloader.FailShuttingDown},
		{"pool closing", nil, state{isPoolClosed: true}, errors.New("x"), downloader.FailShuttingDown},
		{"hop refused", errHopRefused, state{}, nil, downloader.FailSelfRateLimited},
		{"browser lost", nil, state{isBrowserLost: true}, errors.New("x"), downloader.FailRendererCrashed},
		{"tab detached", nil, state{isDetached: true}, errors.New("x"), downloader.FailRendererCrashed},
		{"renderer crashed", nil, state{isCrashed: true}, errors.New("x"), downloader.FailRendererCrashed},
		{"tab gone", nil, state{isTabGone: true}, errors.New("x"), downloader.FailRendererCrashed},
		{"caller gave up", context.Canceled, state{}, context.Canceled, downloader.FailShuttingDown},
		{"browser error", nil, state{}, errors.New("protocol error"), downloader.FailRendererCrashed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			poolCtx, closePool := context.WithCancel(context.Background())
			defer closePool()
			if tt.st.isPoolClosed {
				closePool()
			}
			lost, detached := make(chan struct{}), make(chan struct{})
			if tt.st.isBrowserLost {
				close(lost)
			}
			if tt.st.isDetached {
				close(detached)
			}
			tabCtx, closeTab := context.WithCancel(context.Background())
			defer closeTab()
			if tt.st.isTabGone {
				closeTab()
			}
			tr := newTracker()
			tr.crashed = tt.st.isCrashed
			tb := &tab{b: &browser{lost: lost}, ctx: tabCtx, detached: detached, tr: tr}
			u, _ := url.Parse("http://a.test/")
			j := &renderJob{p: &Pool{ctx: poolCtx, log: slog.New(slog.DiscardHandler)}, u: u}
			runCtx, stop := context.WithCancelCause(context.Background())
			defer stop(nil)
			if tt.cause != nil {
				stop(tt.cause)
			}
			c := j.stopped(runCtx, tb, tt.err)
			if !isFailureCause(c) {
				t.Fatalf("stopped = %s: not a failure's cause", c)
			}
			if got := c.FailReason(); got != tt.want {
				t.Errorf("stopped = %s (%s), want %s", c, got, tt.want)
			}
		})
	}
}

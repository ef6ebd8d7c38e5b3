package fetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"downloader"
	"downloader/netguard"
)

// Classify maps an error from a fetch (the transport, the guard, the resolver, a body
// read) to SPEC §4's closed fail_reason set, from the error alone. It is safe for
// concurrent use. In order:
//
//   - nil → "" (success);
//   - *netguard.ForbiddenError → destination_forbidden;
//   - *net.DNSError: IsNotFound (NXDOMAIN, no address) → domain_not_found; anything else
//     (timeout, SERVFAIL, a resolver that cannot be reached) → resolver_unavailable;
//   - context.Canceled → shutting_down: the caller gave up, which is our side;
//   - our own resources (EMFILE, ENFILE, ENOBUFS, ENOMEM) → local_queue_full: the origin
//     was never reached and must not be blamed;
//   - a TLS or certificate error, or net/http's TLS handshake timeout → tls_failed;
//   - ECONNREFUSED → connect_refused;
//   - a dial that timed out, EHOSTUNREACH, ENETUNREACH → connect_timeout;
//   - ECONNRESET, ECONNABORTED, EPIPE, EOF, unexpected EOF → connection_reset;
//   - any other timeout (no headers in time, a stalled body, a deadline) → response_timeout;
//   - anything else after a connection (a malformed response, say) → connection_reset.
//
// Fetch refines this with what it saw of the request's progress: a deadline that ends the
// request before any connection is connect_timeout, after one is response_timeout; an
// error during the TLS handshake is tls_failed; a failed wire wait is self_rate_limited.
func Classify(err error) downloader.FailReason {
	if err == nil {
		return ""
	}
	var forbidden *netguard.ForbiddenError
	if errors.As(err, &forbidden) {
		return downloader.FailDestinationForbidden
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		if dnsErr.IsNotFound {
			return downloader.FailDomainNotFound
		}
		return downloader.FailResolverUnavailable
	}
	switch {
	case errors.Is(err, context.Canceled):
		return downloader.FailShuttingDown
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE),
		errors.Is(err, syscall.ENOBUFS), errors.Is(err, syscall.ENOMEM):
		return downloader.FailLocalQueueFull
	case isTLSError(err):
		return downloader.FailTLSFailed
	case errors.Is(err, syscall.ECONNREFUSED):
		return downloader.FailConnectRefused
	case isDialTimeout(err), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return downloader.FailConnectTimeout
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return downloader.FailConnectionReset
	case isTimeout(err):
		return downloader.FailResponseTimeout
	}
	return downloader.FailConnectionReset
}

// hopRefusalReason is the fail reason of a redirect hop that was not admitted (err from
// HopAdmitter.AdmitHop): shutting_down when the caller gave up; runtime_store_unavailable
// when the shared limiter state could not be reached (an EUNAVAILABLE *downloader.Error:
// cluster mode fails closed); otherwise our own limiter's refusal, self_rate_limited.
// None of them reached the origin with this hop.
func hopRefusalReason(err error) downloader.FailReason {
	switch {
	case errors.Is(err, context.Canceled):
		return downloader.FailShuttingDown
	case downloader.ErrorCode(err) == downloader.EUNAVAILABLE:
		return downloader.FailRuntimeStoreUnavailable
	}
	return downloader.FailSelfRateLimited
}

// classifyHop is Classify with what the trace saw of this hop.
func (f *Fetcher) classifyHop(ctx, hopCtx context.Context, st *hopState, err error) downloader.FailReason {
	if st.wireErr != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return downloader.FailShuttingDown
		}
		return downloader.FailSelfRateLimited
	}
	if errors.Is(err, errTicketUsed) {
		// A second send of a request that went out once: the origin has the first.
		return downloader.FailConnectionReset
	}
	if errors.Is(context.Cause(hopCtx), errBodyStalls) {
		return downloader.FailResponseTimeout
	}
	switch ctx.Err() {
	case context.Canceled:
		return downloader.FailShuttingDown
	case context.DeadlineExceeded:
		// The caller's overall deadline: which side was slow depends on how far we got.
		if reason := Classify(err); reason == downloader.FailDomainNotFound || reason == downloader.FailResolverUnavailable ||
			reason == downloader.FailDestinationForbidden || reason == downloader.FailConnectRefused {
			return reason // a definite answer that came before the deadline
		}
		if st.tlsStarted.Load() && !st.tlsDone.Load() {
			return downloader.FailTLSFailed
		}
		if st.connected.Load() {
			return downloader.FailResponseTimeout
		}
		return downloader.FailConnectTimeout
	}
	reason := Classify(err)
	if st.tlsStarted.Load() && !st.tlsDone.Load() && !st.connected.Load() {
		switch reason {
		case downloader.FailConnectionReset, downloader.FailResponseTimeout, downloader.FailConnectTimeout:
			return downloader.FailTLSFailed // the handshake broke off
		}
	}
	if reason == downloader.FailResponseTimeout && !st.connected.Load() {
		return downloader.FailConnectTimeout
	}
	return reason
}

func isTLSError(err error) bool {
	var (
		verr   *tls.CertificateVerificationError
		rerr   tls.RecordHeaderError
		aerr   tls.AlertError
		uaerr  x509.UnknownAuthorityError
		herr   x509.HostnameError
		cerr   x509.CertificateInvalidError
		echErr *tls.ECHRejectionError
	)
	switch {
	case errors.As(err, &verr), errors.As(err, &rerr), errors.As(err, &aerr), errors.As(err, &uaerr),
		errors.As(err, &herr), errors.As(err, &cerr), errors.As(err, &echErr):
		return true
	}
	// net/http's handshake timeout and crypto/tls's own failures have no exported type.
	msg := err.Error()
	return strings.Contains(msg, "TLS handshake timeout") || strings.Contains(msg, "tls: ")
}

func isDialTimeout(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return op.Timeout() || errors.Is(op.Err, context.DeadlineExceeded)
	}
	return false
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errBodyStalls) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

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
// read) to the cause it tells (downloader.Cause; the engine decides SPEC §4's
// fail_reason from it), from the error alone. It is safe for concurrent use. In order:
//
//   - nil → CauseOK;
//   - an egress proxy's error (package egressproxy) → the cause it tells: our proxy down
//     or refusing us (egress_proxy_failed), or the target's failure it reported;
//   - *netguard.ForbiddenError → destination forbidden;
//   - *net.DNSError: IsNotFound (NXDOMAIN, no address) → domain not found; anything else
//     (timeout, SERVFAIL, a resolver that cannot be reached) → our resolver failed;
//   - context.Canceled → cancelled: the caller gave up, which is our side;
//   - our own resources (EMFILE, ENFILE, ENOBUFS, ENOMEM) → out of resources: the origin
//     was never reached and must not be blamed;
//   - a TLS or certificate error, or net/http's TLS handshake timeout → TLS failed;
//   - ECONNREFUSED → connect refused;
//   - a dial that timed out, EHOSTUNREACH, ENETUNREACH → connect timeout;
//   - ECONNRESET, ECONNABORTED, EPIPE, EOF, unexpected EOF → connection reset;
//   - any other timeout (no headers in time, a stalled body, a deadline) → response timeout;
//   - anything else after a connection (a malformed response, say) → connection reset.
//
// Fetch refines this with what it saw of the request's progress: a deadline that ends the
// request before any connection is a connect timeout, after one a response timeout; an
// error during the TLS handshake is TLS failed; a failed wire wait is CauseWireWaitFailed.
func Classify(err error) downloader.Cause {
	if err == nil {
		return downloader.CauseOK
	}
	if c, ok := egressCause(err); ok {
		return c
	}
	var forbidden *netguard.ForbiddenError
	if errors.As(err, &forbidden) {
		return downloader.CauseDestinationForbidden
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		if dnsErr.IsNotFound {
			return downloader.CauseDomainNotFound
		}
		return downloader.CauseResolverFailed
	}
	switch {
	case errors.Is(err, context.Canceled):
		return downloader.CauseCancelled
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE),
		errors.Is(err, syscall.ENOBUFS), errors.Is(err, syscall.ENOMEM):
		return downloader.CauseOutOfResources
	case isTLSError(err):
		return downloader.CauseTLSFailed
	case errors.Is(err, syscall.ECONNREFUSED):
		return downloader.CauseConnectRefused
	case isDialTimeout(err), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return downloader.CauseConnectTimeout
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return downloader.CauseConnectionReset
	case isTimeout(err):
		return downloader.CauseResponseTimeout
	}
	return downloader.CauseConnectionReset
}

// hopRefusalCause is the cause of a redirect hop that was not admitted (err from
// HopAdmitter.AdmitHop): cancelled when the caller gave up; the shared state unavailable
// when it could not be reached (an EUNAVAILABLE *downloader.Error: cluster mode fails
// closed); otherwise our own limiter's refusal. None of them reached the origin with
// this hop.
func hopRefusalCause(err error) downloader.Cause {
	switch {
	case errors.Is(err, context.Canceled):
		return downloader.CauseCancelled
	case downloader.ErrorCode(err) == downloader.EUNAVAILABLE:
		return downloader.CauseHopSharedUnavailable
	}
	return downloader.CauseHopRefused
}

// classifyHop is Classify with what the trace saw of this hop.
func (f *Fetcher) classifyHop(ctx, hopCtx context.Context, st *hopState, err error) downloader.Cause {
	if st.wireErr != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return downloader.CauseCancelled
		}
		return downloader.CauseWireWaitFailed
	}
	if errors.Is(err, errTicketUsed) {
		// A second send of a request that went out once: the origin has the first.
		return downloader.CauseConnectionReset
	}
	if errors.Is(context.Cause(hopCtx), errBodyStalls) {
		return downloader.CauseResponseTimeout
	}
	switch ctx.Err() {
	case context.Canceled:
		return downloader.CauseCancelled
	case context.DeadlineExceeded:
		// The caller's overall deadline: which side was slow depends on how far we got.
		switch c := Classify(err); c {
		case downloader.CauseDomainNotFound, downloader.CauseResolverFailed,
			downloader.CauseDestinationForbidden, downloader.CauseConnectRefused,
			downloader.CauseEgressProxyFailed:
			return c // a definite answer that came before the deadline
		}
		if st.tlsStarted.Load() && !st.tlsDone.Load() {
			return downloader.CauseTLSFailed
		}
		if st.connected.Load() {
			return downloader.CauseResponseTimeout
		}
		return downloader.CauseConnectTimeout
	}
	c := Classify(err)
	if st.tlsStarted.Load() && !st.tlsDone.Load() && !st.connected.Load() {
		switch c {
		case downloader.CauseConnectionReset, downloader.CauseResponseTimeout, downloader.CauseConnectTimeout:
			return downloader.CauseTLSFailed // the handshake broke off
		}
	}
	if c == downloader.CauseResponseTimeout && !st.connected.Load() {
		return downloader.CauseConnectTimeout
	}
	return c
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

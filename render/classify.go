package render

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/chromedp/cdproto/network"

	"downloader"
	"downloader/netguard"
	"downloader/render/renderproxy"
)

// errorCause is the cause an error of the proxy's connection to an origin tells (a Go
// error), the way plain fetch classifies its own (SPEC §4).
func errorCause(err error) downloader.Cause {
	var fe *netguard.ForbiddenError
	var dnsErr *net.DNSError
	var egress interface{ EgressCause() downloader.Cause } // an egress proxy's (egressproxy)
	switch {
	case errors.As(err, &egress):
		return egress.EgressCause()
	case errors.As(err, &fe):
		return downloader.CauseDestinationForbidden
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return downloader.CauseDomainNotFound
		}
		return downloader.CauseResolverFailed
	case errors.Is(err, syscall.ECONNREFUSED):
		return downloader.CauseConnectRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return downloader.CauseConnectionReset
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return downloader.CauseConnectRefused
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return downloader.CauseConnectTimeout
	case errors.Is(err, renderproxy.ErrNotArmed), errors.Is(err, errReleased), errors.Is(err, context.Canceled):
		return downloader.CauseRendererCrashed // ours: the render was over
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return downloader.CauseConnectTimeout
	}
	return downloader.CauseConnectionReset
}

// netErrors maps the browser's net::ERR_* names (net/base/net_error_list.h) of a failed
// main document to the causes they tell (downloader.Cause, and so the fail reasons).
// With our proxy in the path most origin failures arrive as the proxy's own answers
// instead; these are the rest.
var netErrors = map[string]downloader.Cause{
	"ERR_NAME_NOT_RESOLVED":           downloader.CauseDomainNotFound,
	"ERR_NAME_RESOLUTION_FAILED":      downloader.CauseResolverFailed,
	"ERR_DNS_TIMED_OUT":               downloader.CauseResolverFailed,
	"ERR_CONNECTION_REFUSED":          downloader.CauseConnectRefused,
	"ERR_ADDRESS_UNREACHABLE":         downloader.CauseConnectRefused,
	"ERR_CONNECTION_FAILED":           downloader.CauseConnectRefused,
	"ERR_CONNECTION_TIMED_OUT":        downloader.CauseConnectTimeout,
	"ERR_TIMED_OUT":                   downloader.CauseResponseTimeout,
	"ERR_CONNECTION_RESET":            downloader.CauseConnectionReset,
	"ERR_CONNECTION_CLOSED":           downloader.CauseConnectionReset,
	"ERR_CONNECTION_ABORTED":          downloader.CauseConnectionReset,
	"ERR_EMPTY_RESPONSE":              downloader.CauseConnectionReset,
	"ERR_INVALID_RESPONSE":            downloader.CauseConnectionReset,
	"ERR_INVALID_HTTP_RESPONSE":       downloader.CauseConnectionReset,
	"ERR_CONTENT_LENGTH_MISMATCH":     downloader.CauseConnectionReset,
	"ERR_INCOMPLETE_CHUNKED_ENCODING": downloader.CauseConnectionReset,
	"ERR_RESPONSE_HEADERS_TOO_BIG":    downloader.CauseConnectionReset,
	"ERR_CONTENT_DECODING_FAILED":     downloader.CauseConnectionReset,
	"ERR_TOO_MANY_REDIRECTS":          downloader.CauseHTTPStatus,
	// A 3xx whose Location is no URL: the origin's bad answer (SPEC §4), as a plain
	// fetch says; the browser reports no event with the redirect's status.
	"ERR_INVALID_REDIRECT":           downloader.CauseHTTPStatus,
	"ERR_HTTP_RESPONSE_CODE_FAILURE": downloader.CauseHTTPStatus,
	"ERR_UNSAFE_REDIRECT":            downloader.CauseDestinationForbidden,
	"ERR_UNSAFE_PORT":                downloader.CauseDestinationForbidden,
	"ERR_DISALLOWED_URL_SCHEME":      downloader.CauseDestinationForbidden,
	"ERR_BLOCKED_BY_RESPONSE":        downloader.CauseHTTPStatus,
	// Our own side: the browser could not reach our proxy, or lost its network.
	"ERR_PROXY_CONNECTION_FAILED": downloader.CauseRendererUnavailable,
	"ERR_INTERNET_DISCONNECTED":   downloader.CauseRendererUnavailable,
	"ERR_NETWORK_CHANGED":         downloader.CauseRendererUnavailable,
	"ERR_ABORTED":                 downloader.CauseRendererCrashed,
}

// netErrorCause is the cause a net::ERR_* text tells. TLS and certificate errors are
// TLS failed; an unknown error is connection reset (a failure on the path to the origin).
func netErrorCause(text string) downloader.Cause {
	name := strings.TrimPrefix(strings.TrimSpace(text), "net::")
	if r, ok := netErrors[name]; ok {
		return r
	}
	switch {
	case strings.HasPrefix(name, "ERR_SSL_"), strings.HasPrefix(name, "ERR_CERT_"),
		strings.Contains(name, "_TLS_"), name == "ERR_BAD_SSL_CLIENT_AUTH_CERT":
		return downloader.CauseTLSFailed
	}
	return downloader.CauseConnectionReset
}

// proxyCauseOf returns the cause of an answer that our proxy marked with token, or
// CauseReported (none) for an answer of the origin.
func proxyCauseOf(h network.Headers, token string) downloader.Cause {
	return renderproxy.MarkCause(header(h, renderproxy.ErrorHeader), token)
}

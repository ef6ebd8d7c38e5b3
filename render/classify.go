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
)

// classifyError classifies an error of the proxy's connection to an origin (a Go error),
// the way plain fetch does (SPEC §4).
func classifyError(err error) downloader.FailReason {
	var fe *netguard.ForbiddenError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &fe):
		return downloader.FailDestinationForbidden
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return downloader.FailDomainNotFound
		}
		return downloader.FailResolverUnavailable
	case errors.Is(err, syscall.ECONNREFUSED):
		return downloader.FailConnectRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return downloader.FailConnectionReset
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return downloader.FailConnectRefused
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return downloader.FailConnectTimeout
	case errors.Is(err, errNotArmed), errors.Is(err, errReleased), errors.Is(err, context.Canceled):
		return downloader.FailRendererCrashed // ours: the render was over
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return downloader.FailConnectTimeout
	}
	return downloader.FailConnectionReset
}

// netErrors maps the browser's net::ERR_* names (net/base/net_error_list.h) of a failed
// main document to fail reasons. With our proxy in the path most origin failures arrive
// as the proxy's own answers instead; these are the rest.
var netErrors = map[string]downloader.FailReason{
	"ERR_NAME_NOT_RESOLVED":           downloader.FailDomainNotFound,
	"ERR_NAME_RESOLUTION_FAILED":      downloader.FailResolverUnavailable,
	"ERR_DNS_TIMED_OUT":               downloader.FailResolverUnavailable,
	"ERR_CONNECTION_REFUSED":          downloader.FailConnectRefused,
	"ERR_ADDRESS_UNREACHABLE":         downloader.FailConnectRefused,
	"ERR_CONNECTION_FAILED":           downloader.FailConnectRefused,
	"ERR_CONNECTION_TIMED_OUT":        downloader.FailConnectTimeout,
	"ERR_TIMED_OUT":                   downloader.FailResponseTimeout,
	"ERR_CONNECTION_RESET":            downloader.FailConnectionReset,
	"ERR_CONNECTION_CLOSED":           downloader.FailConnectionReset,
	"ERR_CONNECTION_ABORTED":          downloader.FailConnectionReset,
	"ERR_EMPTY_RESPONSE":              downloader.FailConnectionReset,
	"ERR_INVALID_RESPONSE":            downloader.FailConnectionReset,
	"ERR_INVALID_HTTP_RESPONSE":       downloader.FailConnectionReset,
	"ERR_CONTENT_LENGTH_MISMATCH":     downloader.FailConnectionReset,
	"ERR_INCOMPLETE_CHUNKED_ENCODING": downloader.FailConnectionReset,
	"ERR_RESPONSE_HEADERS_TOO_BIG":    downloader.FailConnectionReset,
	"ERR_CONTENT_DECODING_FAILED":     downloader.FailConnectionReset,
	"ERR_TOO_MANY_REDIRECTS":          downloader.FailHTTPStatusError,
	"ERR_HTTP_RESPONSE_CODE_FAILURE":  downloader.FailHTTPStatusError,
	"ERR_UNSAFE_REDIRECT":             downloader.FailDestinationForbidden,
	"ERR_UNSAFE_PORT":                 downloader.FailDestinationForbidden,
	"ERR_DISALLOWED_URL_SCHEME":       downloader.FailDestinationForbidden,
	"ERR_BLOCKED_BY_RESPONSE":         downloader.FailHTTPStatusError,
	// Our own side: the browser could not reach our proxy, or lost its network.
	"ERR_PROXY_CONNECTION_FAILED": downloader.FailRendererUnavailable,
	"ERR_INTERNET_DISCONNECTED":   downloader.FailRendererUnavailable,
	"ERR_NETWORK_CHANGED":         downloader.FailRendererUnavailable,
	"ERR_ABORTED":                 downloader.FailRendererCrashed,
}

// classifyNetError classifies a net::ERR_* text. TLS and certificate errors are
// tls_failed; an unknown error is connection_reset (a failure on the path to the origin).
func classifyNetError(text string) downloader.FailReason {
	name := strings.TrimPrefix(strings.TrimSpace(text), "net::")
	if r, ok := netErrors[name]; ok {
		return r
	}
	switch {
	case strings.HasPrefix(name, "ERR_SSL_"), strings.HasPrefix(name, "ERR_CERT_"),
		strings.Contains(name, "_TLS_"), name == "ERR_BAD_SSL_CLIENT_AUTH_CERT":
		return downloader.FailTLSFailed
	}
	return downloader.FailConnectionReset
}

// proxyReasonOf returns the fail reason of an answer that our proxy marked with token,
// or "" for an answer of the origin.
func proxyReasonOf(h network.Headers, token string) downloader.FailReason {
	v := header(h, proxyErrorHeader)
	if v == "" || token == "" {
		return ""
	}
	tok, reason, ok := strings.Cut(v, " ")
	if !ok || tok != token {
		return ""
	}
	r := downloader.FailReason(reason)
	if !r.IsValid() || r == "" {
		return downloader.FailConnectionReset
	}
	return r
}

package renderproxy

import (
	"net"
	"net/http"
	"net/url"
	"strings"

	"downloader"
)

// ChainHeader marks our own requests of a main document's redirect chain (package
// render's resolveChain) to the render's proxy, with the proxy's token so a page cannot
// forge it: the proxy does not admit them again (resolveChain did) and strips the header.
const ChainHeader = "X-Downloader-Chain"

// isChainRequest reports whether r is one of resolveChain's, and strips the mark.
func (x *Proxy) isChainRequest(r *http.Request) bool {
	v := r.Header.Get(ChainHeader)
	r.Header.Del(ChainHeader)
	return v != "" && v == x.token
}

// Mark is the value of ErrorHeader on our proxy's own answer: the proxy's token
// and the cause's stable name (downloader.Cause.String), so that the render reads back the
// cause itself rather than a reason.
func Mark(token string, c downloader.Cause) string { return token + " " + c.String() }

// MarkCause is the cause an ErrorHeader value v tells: CauseReported (none) unless
// it carries token; a mark with a name that is not a failure's cause is a broken answer on
// the path (connection reset).
func MarkCause(v, token string) downloader.Cause {
	if v == "" || token == "" {
		return downloader.CauseReported
	}
	tok, name, ok := strings.Cut(v, " ")
	if !ok || tok != token {
		return downloader.CauseReported
	}
	if c, ok := downloader.ParseCause(name); ok && c.IsFailure() {
		return c
	}
	return downloader.CauseConnectionReset
}

// HostPort is the host:port a CONNECT for rawURL names.
func HostPort(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

package downloader

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// RequestHeaders are the headers a caller asks one request to send (SPEC §5, "On the real
// web"): `request_headers` on entries A, B and C, an object of header name → value. Only
// the names of the allow-list are accepted (HeaderPolicy.Check); the names that decide a
// request's identity or routing are ours to write.
type RequestHeaders map[string]string

// Limits of request headers: enough for a consent cookie or a language list, far from what
// an origin's header limits (8–16 KiB in common servers) would refuse.
const (
	MaxRequestHeaderValueBytes = 4096
	MaxRequestHeadersBytes     = 8192
)

// allowedRequestHeaders are the names a caller may set, in canonical form. Accept-Language
// asks for a language's pages, Cookie carries a consent or session cookie, Referer is what a
// site's links would send. User-Agent is allowed only when the operator says so
// (HeaderPolicy).
var allowedRequestHeaders = []string{"Accept-Language", "Cookie", "Referer"}

// refusedRequestHeaders are named in the answer when a caller tries them: they decide the
// request's identity or routing (Host), the connection (hop-by-hop headers, RFC 9110 §7.6.1),
// the body and its coding (ours to negotiate and decode under the body cap), or our own
// conditional requests.
var refusedRequestHeaders = map[string]string{
	"Host":                "it is the URL's canonical host",
	"Connection":          "it is a hop-by-hop header",
	"Keep-Alive":          "it is a hop-by-hop header",
	"Proxy-Connection":    "it is a hop-by-hop header",
	"Proxy-Authorization": "it is a hop-by-hop header",
	"Te":                  "it is a hop-by-hop header",
	"Trailer":             "it is a hop-by-hop header",
	"Transfer-Encoding":   "it is a hop-by-hop header",
	"Upgrade":             "it is a hop-by-hop header",
	"Content-Length":      "a GET has no body",
	"Accept-Encoding":     "the downloader negotiates and decodes the content coding itself, under the body cap",
	"If-None-Match":       "conditional requests are the downloader's, from the page store's validators",
	"If-Modified-Since":   "conditional requests are the downloader's, from the page store's validators",
}

// HeaderPolicy says which request headers callers may set. The zero value allows the
// allow-list without User-Agent. Safe for concurrent use (a value).
type HeaderPolicy struct {
	// ShouldAllowUserAgent lets callers set User-Agent (the operator's choice: the service's
	// own User-Agent is how a site tells our crawler apart).
	ShouldAllowUserAgent bool
}

// Check validates h against the policy and returns it with canonical names (nil for an
// empty or nil h). Errors are EINVALID naming the field as field.Name (field itself when
// the set as a whole is at fault), for example "request_headers.Host".
func (p HeaderPolicy) Check(field string, h map[string]string) (RequestHeaders, error) {
	if len(h) == 0 {
		return nil, nil
	}
	out := make(RequestHeaders, len(h))
	total := 0
	// Sorted names: one input gets one answer, whatever the map's order.
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		value := h[name]
		f := field + "." + name
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, Invalidf(f, "%s is not a valid header name", f)
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if why, refused := refusedRequestHeaders[canon]; refused {
			return nil, Invalidf(f, "%s cannot be set: %s", f, why)
		}
		if canon == "User-Agent" && !p.ShouldAllowUserAgent {
			return nil, Invalidf(f, "%s cannot be set: the operator has not allowed it (--should-allow-user-agent-header)", f)
		}
		if canon != "User-Agent" && !slices.Contains(allowedRequestHeaders, canon) {
			return nil, Invalidf(f, "%s is not an allowed request header (allowed: %s)", f, strings.Join(p.allowed(), ", "))
		}
		if _, dup := out[canon]; dup {
			return nil, Invalidf(f, "%s is given twice (header names are case-insensitive)", f)
		}
		if value == "" || strings.TrimSpace(value) != value || !httpguts.ValidHeaderFieldValue(value) {
			return nil, Invalidf(f, "%s must be a non-empty header value without control characters or surrounding spaces", f)
		}
		if len(value) > MaxRequestHeaderValueBytes {
			return nil, Invalidf(f, "%s is longer than %d bytes", f, MaxRequestHeaderValueBytes)
		}
		total += len(canon) + len(value)
		out[canon] = value
	}
	if total > MaxRequestHeadersBytes {
		return nil, Invalidf(field, "%s are longer than %d bytes in all", field, MaxRequestHeadersBytes)
	}
	return out, nil
}

// allowed lists the names the policy accepts.
func (p HeaderPolicy) allowed() []string {
	if p.ShouldAllowUserAgent {
		return append(slices.Clone(allowedRequestHeaders), "User-Agent")
	}
	return allowedRequestHeaders
}

// ParseHeaderLine reads one "Name: value" line (the service's --default-request-header) and
// checks it against the policy like a caller's header. field names the flag in errors.
func (p HeaderPolicy) ParseHeaderLine(field, line string) (name, value string, err error) {
	name, value, ok := strings.Cut(line, ":")
	if !ok {
		return "", "", Invalidf(field, "%s %q is not of the form 'Name: value'", field, line)
	}
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	h, err := p.Check(field, map[string]string{name: value})
	if err != nil {
		return "", "", err
	}
	for n, v := range h {
		return n, v, nil
	}
	return "", "", Invalidf(field, "%s %q is empty", field, line)
}

// Merge returns defaults overlaid with h (a caller's value replaces the service's default
// of the same name). The result is a new map; nil when both are empty.
func (h RequestHeaders) Merge(defaults RequestHeaders) RequestHeaders {
	if len(defaults) == 0 {
		return h
	}
	if len(h) == 0 {
		return defaults
	}
	out := make(RequestHeaders, len(h)+len(defaults))
	for n, v := range defaults {
		out[n] = v
	}
	for n, v := range h {
		out[n] = v
	}
	return out
}

// isCrossHostSensitive reports the headers dropped on a redirect to another host, as
// browsers and net/http drop credentials there: a site's cookie is for that site alone.
func isCrossHostSensitive(canon string) bool {
	return canon == "Cookie"
}

// ForHop returns the headers to send on a redirect hop: all of them to the request's own
// host, and on a hop to another host those that carry no site's credentials.
func (h RequestHeaders) ForHop(sameHost bool) RequestHeaders {
	if sameHost || len(h) == 0 {
		return h
	}
	var out RequestHeaders
	for n, v := range h {
		if isCrossHostSensitive(n) {
			continue
		}
		if out == nil {
			out = make(RequestHeaders, len(h))
		}
		out[n] = v
	}
	return out
}

// SetOn writes h into hdr (replacing values of the same names).
func (h RequestHeaders) SetOn(hdr http.Header) {
	for n, v := range h {
		hdr[n] = []string{v}
	}
}

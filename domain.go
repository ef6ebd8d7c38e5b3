package downloader

import (
	"net"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// maxURLLength bounds the URLs the service accepts.
const maxURLLength = 8192

// NormalizeDomain returns the limiter key of a host: lower case, IDNA to ASCII, without
// port or trailing dot (SPEC §2). IP literals are returned in their canonical form.
func NormalizeDomain(host string) (string, error) {
	h := strings.TrimSpace(host)
	if h == "" {
		return "", Invalidf("domain", "domain is empty")
	}
	if strings.HasPrefix(h, "[") {
		// [v6] or [v6]:port
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", Invalidf("domain", "domain %q has an unterminated IPv6 literal", host)
		}
		ip := net.ParseIP(h[1:end])
		if ip == nil {
			return "", Invalidf("domain", "domain %q is not a valid IPv6 literal", host)
		}
		return ip.String(), nil
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		if strings.Count(h, ":") > 1 {
			if ip := net.ParseIP(h); ip != nil {
				return ip.String(), nil
			}
			return "", Invalidf("domain", "domain %q is not a host name", host)
		}
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return "", Invalidf("domain", "domain %q is empty", host)
	}
	if ip := net.ParseIP(h); ip != nil {
		return ip.String(), nil
	}
	if !utf8.ValidString(h) {
		return "", Invalidf("domain", "domain %q is not valid UTF-8", host)
	}
	ascii, err := idna.Lookup.ToASCII(h)
	if err == nil && ascii != h {
		// The result must itself be a valid name: some inputs encode to labels that
		// the lookup profile then refuses.
		_, err = idna.Lookup.ToASCII(ascii)
	}
	if err != nil {
		return "", Invalidf("domain", "domain %q is not a valid host name: %v", host, err)
	}
	ascii = strings.ToLower(strings.TrimSuffix(ascii, "."))
	if ascii == "" || strings.HasSuffix(ascii, ".") {
		return "", Invalidf("domain", "domain %q is not a valid host name", host)
	}
	if len(ascii) > 253 {
		return "", Invalidf("domain", "domain %q is longer than 253 characters", host)
	}
	return ascii, nil
}

// ParseTargetURL validates a URL given by a caller or a task and returns it with its
// normalised domain. Field names the request field for error messages.
func ParseTargetURL(field, raw string) (*url.URL, string, error) {
	if raw == "" {
		return nil, "", Invalidf(field, "%s is required", field)
	}
	if len(raw) > maxURLLength {
		return nil, "", Invalidf(field, "%s is longer than %d bytes", field, maxURLLength)
	}
	// url.Parse takes "http://news.test/ bad" and quietly escapes the space: a URL with
	// white space or a control character is a mistake (a pasted line, two URLs in one),
	// so it is refused rather than fetched as something the caller did not write.
	if i := strings.IndexFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f || unicode.IsSpace(r) }); i >= 0 {
		return nil, "", Invalidf(field, "%s contains white space or a control character at byte %d (percent-encode it)", field, i)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", Invalidf(field, "%s is not a valid URL", field)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	default:
		return nil, "", Invalidf(field, "%s must be an http or https URL", field)
	}
	if u.User != nil {
		return nil, "", Invalidf(field, "%s must not carry credentials", field)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, "", Invalidf(field, "%s has no host", field)
	}
	if p := u.Port(); p != "" {
		if n, ok := parsePort(p); !ok || n == 0 {
			return nil, "", Invalidf(field, "%s has an invalid port %q", field, p)
		}
	}
	d, err := NormalizeDomain(u.Hostname())
	if err != nil {
		return nil, "", Invalidf(field, "%s has an invalid host: %s", field, ErrorMessage(err))
	}
	return u, d, nil
}

func parsePort(p string) (int, bool) {
	if len(p) > 5 {
		return 0, false
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= 65535
}

package downloader

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// maxURLLength bounds the URLs the service accepts.
const maxURLLength = 8192

// ParseTargetURL validates a URL given by a caller or a task and returns it REWRITTEN to
// its canonical host (CanonicalHost), with that host: everything downstream (the limiter
// key, the SSRF guard, --connect-to, the dial, the Host header, the TLS server name) reads
// the one host of the returned URL (SPEC §2). The scheme is lower case, the port is kept
// in decimal unless it is the scheme's default (dropped, as a browser does: the Host
// header is then the bare host). Field names the request field for error messages.
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
	rewritten, host, err := canonicalAuthority(raw)
	if err != nil {
		return nil, "", Invalidf(field, "%s %s", field, err.Error())
	}
	u, err := url.Parse(rewritten)
	if err != nil {
		return nil, "", Invalidf(field, "%s is not a valid URL", field)
	}
	switch u.Scheme {
	case "http", "https":
	default:
		return nil, "", Invalidf(field, "%s must be an http or https URL", field)
	}
	if u.User != nil {
		return nil, "", Invalidf(field, "%s must not carry credentials", field)
	}
	if host == "" || u.Hostname() == "" {
		return nil, "", Invalidf(field, "%s has no host", field)
	}
	return u, host, nil
}

// ParseLocation resolves a redirect's Location against the URL that answered it, as a
// browser does, and when the target is http or https returns it rewritten to its
// canonical host (CanonicalizeURL), so that a redirect hop is admitted, guarded and sent
// with the one host (SPEC §2). A target of another scheme, or whose host has no canonical
// form, is returned as parsed: the caller's guard refuses the latter (CheckURLHost reads
// hosts only through CanonicalHost), so it is refused as a hop, never sent.
func ParseLocation(base *url.URL, loc string) (*url.URL, error) {
	ref := loc
	if strings.HasPrefix(loc, "//") && base != nil {
		ref = base.Scheme + ":" + loc
	}
	if rewritten, _, err := canonicalAuthority(ref); err == nil {
		ref = rewritten
	} else {
		ref = loc
	}
	next, err := base.Parse(ref)
	if err != nil {
		return nil, fmt.Errorf("redirect to %q: %w", loc, err)
	}
	switch next.Scheme {
	case "http", "https":
		if c, _, err := CanonicalizeURL(next); err == nil {
			next = c
		}
	}
	return next, nil
}

// CanonicalizeURL returns a copy of an http(s) URL already parsed (a redirect target, a
// URL the browser asked for) with its host canonical and its port as ParseTargetURL
// writes it, and that host.
func CanonicalizeURL(u *url.URL) (*url.URL, string, error) {
	h, err := CanonicalHost(u.Host)
	if err != nil {
		return nil, "", err
	}
	port := u.Port()
	if port != "" {
		n, ok := parsePort(port)
		if !ok || n == 0 {
			return nil, "", Invalidf("url", "url has an invalid port %q", port)
		}
		port = strconv.Itoa(n)
	}
	c := *u
	c.Scheme = strings.ToLower(c.Scheme)
	c.Host = joinHostPort(c.Scheme, h, port)
	return &c, h, nil
}

// splitHTTPScheme splits "http://rest" or "https://rest" (scheme in any case) into the
// lower-case scheme and rest.
func splitHTTPScheme(s string) (scheme, rest string, ok bool) {
	for _, sc := range []string{"http", "https"} {
		if len(s) >= len(sc)+3 && strings.EqualFold(s[:len(sc)], sc) && s[len(sc):len(sc)+3] == "://" {
			return sc, s[len(sc)+3:], true
		}
	}
	return "", "", false
}

// canonicalAuthority rewrites the authority of an http(s) URL written as a string to the
// canonical host (and port), before net/url reads it: net/url refuses a percent-encoded
// ASCII host ("%41.test") a browser reads, and would hand the Unicode host on to the Host
// header. A string that is not "http(s)://..." is returned as it is (net/url then gives
// the error). The error says what is wrong after the field's name.
func canonicalAuthority(raw string) (rewritten, host string, err error) {
	scheme, rest, ok := splitHTTPScheme(raw)
	if !ok {
		return raw, "", nil
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if strings.Contains(authority, "@") {
		return "", "", errors.New("must not carry credentials")
	}
	if authority == "" {
		return "", "", errors.New("has no host")
	}
	hostPart, port := authority, ""
	if strings.HasPrefix(authority, "[") {
		if i := strings.IndexByte(authority, ']'); i >= 0 {
			hostPart, port = authority[:i+1], authority[i+1:]
		}
	} else if i := strings.LastIndexByte(authority, ':'); i >= 0 {
		hostPart, port = authority[:i], authority[i:]
	}
	if port != "" {
		if port[0] != ':' {
			return "", "", fmt.Errorf("has an invalid host %q", authority)
		}
		port = port[1:]
		if port != "" {
			n, ok := parsePort(port)
			if !ok || n == 0 {
				return "", "", fmt.Errorf("has an invalid port %q", port)
			}
			port = strconv.Itoa(n)
		}
	}
	if hostPart == "" {
		return "", "", errors.New("has no host")
	}
	h, err := CanonicalHost(hostPart)
	if err != nil {
		return "", "", fmt.Errorf("has an invalid host: %s", ErrorMessage(err))
	}
	return scheme + "://" + joinHostPort(scheme, h, port) + tail, h, nil
}

// joinHostPort writes a canonical host and port as a URL's authority: an IPv6 address in
// brackets, the scheme's default port left out.
func joinHostPort(scheme, host, port string) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "" || (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		return host
	}
	return host + ":" + port
}

func parsePort(p string) (int, bool) {
	if p == "" || len(p) > 5 {
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

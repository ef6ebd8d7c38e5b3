// Package discover finds the URLs a standalone crawl follows (`downloader crawl
// --max-depth`): it reads the links of a fetched or rendered page (links.go) and the URLs
// of a sitemap (sitemap.go), puts each in its one canonical form (this file), keeps those
// in the crawl's scope (scope.go), and hands them to the local queue with their depth
// (crawler.go). It makes no request of its own: every page and sitemap it finds is a task
// of the local queue, which the lease loop runs through robots.txt, the limiter and the
// engine like any other (SPEC §1, §2).
package discover

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"downloader"
)

// Canonical returns the one form of u under which the local queue stores and deduplicates
// a URL, and its normalised domain (the limiter's key, SPEC §2):
//
//   - scheme in lower case; the host as downloader.ParseTargetURL normalises it (lower
//     case, IDNA to ASCII, no trailing dot; IP literals in their canonical form), so that
//     one host is one limiter key and one queue key;
//   - the scheme's default port dropped (http 80, https 443);
//   - the path's dot segments resolved (RFC 3986 §5.2.4), an empty path made "/";
//   - the fragment dropped (it never reaches the origin); an empty query ("?") dropped;
//   - the query kept as it is, in its order: servers may read parameters in order, and
//     sorting them could name another page (docs/decisions.md).
//
// Percent-encoding is left as given. Errors are EINVALID naming the field "url".
func Canonical(u *url.URL) (string, string, error) {
	if u == nil {
		return "", "", downloader.Invalidf("url", "url is required")
	}
	parsed, domain, err := downloader.ParseTargetURL("url", u.String())
	if err != nil {
		return "", "", err
	}
	c := *parsed
	c.Scheme = strings.ToLower(c.Scheme)
	c.User = nil
	host := domain
	if strings.Contains(host, ":") { // an IPv6 literal
		host = "[" + host + "]"
	}
	if p := c.Port(); p != "" {
		n, _ := strconv.Atoi(p) // ParseTargetURL checked it
		if !(c.Scheme == "http" && n == 80) && !(c.Scheme == "https" && n == 443) {
			host = net.JoinHostPort(domain, strconv.Itoa(n))
		}
	}
	c.Host = host
	c.Fragment, c.RawFragment = "", ""
	c.ForceQuery = false
	c.Opaque = ""
	p := c.EscapedPath()
	if p == "" {
		p = "/"
	}
	p = removeDotSegments(p)
	dec, err := url.PathUnescape(p)
	if err != nil {
		return "", "", downloader.Invalidf("url", "url has an invalid path escape")
	}
	c.Path, c.RawPath = dec, p
	return c.String(), domain, nil
}

// CanonicalString parses raw and returns Canonical of it.
func CanonicalString(raw string) (string, string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", "", downloader.Invalidf("url", "url is not a valid URL")
	}
	return Canonical(u)
}

// removeDotSegments is RFC 3986 §5.2.4 over an absolute path.
func removeDotSegments(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
	in := strings.Split(p, "/")
	out := make([]string, 0, len(in))
	for i, seg := range in {
		last := i == len(in)-1
		switch seg {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, seg)
		}
	}
	r := strings.Join(out, "/")
	if !strings.HasPrefix(r, "/") {
		r = "/" + r
	}
	return r
}

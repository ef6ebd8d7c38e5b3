package discover

import (
	"bytes"
	"net/url"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// MaxLinkCount bounds the links read from one page: a page is not a way to flood the
// queue.
const MaxLinkCount = 10_000

// Links is what a page says about its links.
type Links struct {
	// URLs are the absolute http(s) URLs of the page's <a href>, <area href> and
	// <link rel=next|prev href>, resolved against the page's <base href> (or its own URL),
	// in document order, without those marked rel=nofollow. Not canonical: Canonical is
	// the caller's. Empty when IsNofollow.
	URLs []string
	// IsNofollow: <meta name=robots content=nofollow> (or none): no link is followed.
	IsNofollow bool
	// IsNoindex: <meta name=robots content=noindex> (or none).
	IsNoindex bool
	// NofollowCount counts the links left out for their rel=nofollow.
	NofollowCount int
}

// ExtractLinks reads an HTML document (as served, or the DOM after a render) fetched at
// pageURL. It never fails: what does not parse is skipped, as a browser would.
func ExtractLinks(body []byte, pageURL *url.URL) Links {
	var out Links
	var hrefs []string
	var base string
	hasBase := false
	z := html.NewTokenizer(bytes.NewReader(body))
	for len(hrefs) < MaxLinkCount {
		tt := z.Next()
		if tt == html.ErrorToken {
			break
		}
		if tt != html.StartTagToken && tt != html.SelfClosingTagToken {
			continue
		}
		name, hasAttr := z.TagName()
		a := atom.Lookup(name)
		switch a {
		case atom.A, atom.Area, atom.Link, atom.Base, atom.Meta:
		default:
			continue
		}
		if !hasAttr {
			continue
		}
		attrs := map[string]string{}
		for {
			k, v, more := z.TagAttr()
			key := string(k)
			if _, seen := attrs[key]; !seen { // the first of a repeated attribute wins
				attrs[key] = string(v)
			}
			if !more {
				break
			}
		}
		href, hasHref := attrs["href"]
		switch a {
		case atom.Base:
			if hasHref && !hasBase { // the first <base href> is the document's base
				base, hasBase = href, true
			}
		case atom.Meta:
			if !strings.EqualFold(strings.TrimSpace(attrs["name"]), "robots") {
				continue
			}
			for _, d := range strings.Split(attrs["content"], ",") {
				switch strings.ToLower(strings.TrimSpace(d)) {
				case "nofollow":
					out.IsNofollow = true
				case "noindex":
					out.IsNoindex = true
				case "none":
					out.IsNofollow, out.IsNoindex = true, true
				}
			}
		case atom.A, atom.Area, atom.Link:
			if !hasHref {
				continue
			}
			rel := relTokens(attrs["rel"])
			if a == atom.Link && !rel["next"] && !rel["prev"] {
				continue // stylesheets, icons, preloads: not pages
			}
			if rel["nofollow"] {
				out.NofollowCount++
				continue
			}
			hrefs = append(hrefs, href)
		}
	}
	if out.IsNofollow {
		return out
	}
	b := pageURL
	if hasBase {
		if bu, err := pageURL.Parse(strings.TrimSpace(base)); err == nil && (bu.Scheme == "http" || bu.Scheme == "https") {
			b = bu
		}
	}
	for _, h := range hrefs {
		h = strings.TrimSpace(h)
		if h == "" || strings.HasPrefix(h, "#") {
			continue // the page itself
		}
		u, err := b.Parse(h)
		if err != nil {
			continue
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			continue // mailto:, javascript:, data:, ...
		}
		out.URLs = append(out.URLs, u.String())
	}
	return out
}

// relTokens is the set of a rel attribute's tokens, lower case.
func relTokens(rel string) map[string]bool {
	if rel == "" {
		return nil
	}
	m := map[string]bool{}
	for _, t := range strings.Fields(rel) {
		m[strings.ToLower(t)] = true
	}
	return m
}

// IsHTML reports whether a page's Content-Type (or, without one, its first bytes) says
// HTML.
func IsHTML(contentType string, body []byte) bool {
	ct := strings.ToLower(strings.TrimSpace(contentType))
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = strings.TrimSpace(ct[:i])
	}
	switch ct {
	case "text/html", "application/xhtml+xml":
		return true
	case "":
		head := bytes.ToLower(bytes.TrimSpace(body[:min(len(body), 512)]))
		return bytes.HasPrefix(head, []byte("<!doctype html")) || bytes.HasPrefix(head, []byte("<html"))
	}
	return false
}

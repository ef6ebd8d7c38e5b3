package testkit

import (
	"net/http"
	"strconv"
	"strings"
)

// SchemeRedirect is a redirect to a URL of a scheme that neither a fetch nor a render
// follows (or a Location that is no URL): the origin's bad answer (SPEC §4),
// http_status_error with the redirect's own status, reached.
type SchemeRedirect struct {
	Name     string
	Status   int
	Location string
	// IsLocationURL is false for a Location that does not parse as a URL: the same
	// http_status_error everywhere, but a render on Chromium cannot tell its status (the
	// browser fails it, net::ERR_INVALID_REDIRECT, before any event carries the 3xx).
	IsLocationURL bool
}

// SchemeRedirects is the one table of such redirects that fetch's and render's tests both
// run, so that a plain fetch and a render are held to the same answer for the same URL.
func SchemeRedirects() []SchemeRedirect {
	return []SchemeRedirect{
		{"view-source", http.StatusFound, "view-source:http://elsewhere.test/", true},
		{"javascript", http.StatusFound, "javascript:alert(1)", true},
		{"ftp", http.StatusFound, "ftp://files.test/pub/", true},
		{"file", http.StatusFound, "file:///etc/passwd", true},
		{"data", http.StatusFound, "data:text/html,<p>hi</p>", true},
		{"about", http.StatusFound, "about:blank", true},
		{"chrome", http.StatusFound, "chrome://settings/", true},
		{"mailto", http.StatusFound, "mailto:someone@site.test", true},
		{"blob", http.StatusFound, "blob:http://site.test/0c1d", true},
		{"unknown scheme", http.StatusFound, "foo:bar", true},
		{"not a URL", http.StatusFound, "http://[::1", false},
		{"ftp 301", http.StatusMovedPermanently, "ftp://files.test/", true},
		{"view-source 307", http.StatusTemporaryRedirect, "view-source:http://elsewhere.test/", true},
		{"file 308", http.StatusPermanentRedirect, "file:///etc/passwd", true},
		{"javascript 303", http.StatusSeeOther, "javascript:void(0)", true},
	}
}

// SchemeRedirectPages answers /r/<i> with SchemeRedirects()[i]'s status and Location, not
// to be cached (a render's browser would otherwise follow a cached redirect without
// asking), and 404 elsewhere.
func SchemeRedirectPages(w http.ResponseWriter, r *http.Request) {
	table := SchemeRedirects()
	i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
	if err != nil || i < 0 || i >= len(table) {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Location", table[i].Location)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(table[i].Status)
}

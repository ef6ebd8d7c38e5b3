package render

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"downloader"
)

// schemeRedirects are redirects of the main document to a URL of a scheme no render
// fetches: the origin's bad answer (SPEC §4), as a plain fetch says of the same URL.
var schemeRedirects = []struct {
	name     string
	status   int
	location string
}{
	{"view-source", http.StatusFound, "view-source:http://elsewhere.test/"},
	{"javascript", http.StatusFound, "javascript:alert(1)"},
	{"ftp", http.StatusFound, "ftp://files.test/pub/"},
	{"file", http.StatusFound, "file:///etc/passwd"},
	{"data", http.StatusFound, "data:text/html,<p>hi</p>"},
	{"about", http.StatusFound, "about:blank"},
	{"chrome", http.StatusFound, "chrome://settings/"},
	{"mailto", http.StatusFound, "mailto:someone@site.test"},
	{"blob", http.StatusFound, "blob:http://site.test/0c1d"},
	{"unknown scheme", http.StatusFound, "foo:bar"},
	{"ftp 301", http.StatusMovedPermanently, "ftp://files.test/"},
	{"view-source 307", http.StatusTemporaryRedirect, "view-source:http://elsewhere.test/"},
	{"file 308", http.StatusPermanentRedirect, "file:///etc/passwd"},
	{"javascript 303", http.StatusSeeOther, "javascript:void(0)"},
}

// schemeRedirectPages answers /r/<i> with schemeRedirects[i]'s status and Location.
func schemeRedirectPages(w http.ResponseWriter, r *http.Request) {
	i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
	if err != nil || i < 0 || i >= len(schemeRedirects) {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Location", schemeRedirects[i].location)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(schemeRedirects[i].status)
}

// checkSchemeRedirect checks a render of a redirect to another scheme: the origin's bad
// answer, its 3xx, reached.
func checkSchemeRedirect(t *testing.T, out *downloader.Outcome, status int) {
	t.Helper()
	checkCause(t, out)
	if out.Cause != downloader.CauseHTTPStatus || out.FailReason != downloader.FailHTTPStatusError ||
		out.HTTPStatus != status || !out.FailReason.HasReachedOrigin() {
		t.Errorf("cause=%s fail_reason=%s http_status=%d has_reached_origin=%v, want http_status_error %d reached",
			out.Cause, failReason(out), out.HTTPStatus, out.FailReason.HasReachedOrigin(), status)
	}
}

// TestRenderRedirectToOtherScheme: on Chromium's profile, a main document that redirects
// to view-source:, javascript:, ftp:, file:, data: and the like is http_status_error with
// the redirect's status, has_reached_origin=true, not a crash of ours.
func TestRenderRedirectToOtherScheme(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	e := newHopEnvWith(t, 0, frameAdmitNow, schemeRedirectPages)
	for i, tt := range schemeRedirects {
		t.Run(tt.name, func(t *testing.T) {
			out := e.render(t, "scheme.test/r/"+strconv.Itoa(i), 0, safetyTimeout(t))
			checkSchemeRedirect(t, out, tt.status)
		})
	}
	getFixture(t).noViolations(t)
}

// TestObscuraRedirectToOtherScheme: the same on Obscura's profile, where our own requests
// resolve the redirect chain (resolveChain) and the server is never sent to the 3xx.
func TestObscuraRedirectToOtherScheme(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	o := newExampleOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if hostOf(r) == "start" && r.URL.Path == "/hop" {
			// One http(s) hop first: the chain's later answer is judged the same way.
			http.Redirect(w, r, "https://hopa.example.com/r/"+r.URL.Query().Get("i"), http.StatusFound)
			return
		}
		schemeRedirectPages(w, r)
	})
	p, relay := newExamplePool(t, o, nil)
	for i, tt := range schemeRedirects {
		for _, start := range []string{"http://start.example.com/r/", "https://hopa.example.com/r/", "http://start.example.com/hop?i="} {
			navBefore := len(relay.navigated())
			out := p.Render(context.Background(), getFixture(t).url(start+strconv.Itoa(i)), nil, safetyTimeout(t))
			t.Run(tt.name+" from "+start, func(t *testing.T) {
				checkSchemeRedirect(t, out, tt.status)
				if navs := relay.navigated()[navBefore:]; len(navs) != 0 {
					t.Errorf("the server was sent to %v, want nowhere", navs)
				}
			})
		}
	}
	getFixture(t).noViolations(t)
}

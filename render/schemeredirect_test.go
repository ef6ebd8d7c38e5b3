package render

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"downloader"
	"downloader/internal/testkit"
)

// checkSchemeRedirect checks a render of a redirect to another scheme: the origin's bad
// answer, its 3xx (0 where the browser tells none), reached.
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
	e := newHopEnvWith(t, 0, testkit.SchemeRedirectPages)
	for i, tt := range testkit.SchemeRedirects() {
		t.Run(tt.Name, func(t *testing.T) {
			out := e.render(t, "scheme.test/r/"+strconv.Itoa(i), 0, safetyTimeout(t))
			want := tt.Status
			if !tt.IsLocationURL {
				// Chromium fails such a redirect (net::ERR_INVALID_REDIRECT) before any
				// event carries its status: the fail_reason is the fetch's, the status
				// unknown.
				want = 0
			}
			checkSchemeRedirect(t, out, want)
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
		testkit.SchemeRedirectPages(w, r)
	})
	p, relay := newExamplePool(t, o, nil)
	for i, tt := range testkit.SchemeRedirects() {
		for _, start := range []string{"http://start.example.com/r/", "https://hopa.example.com/r/", "http://start.example.com/hop?i="} {
			navBefore := len(relay.navigated())
			out := p.Render(context.Background(), getFixture(t).url(start+strconv.Itoa(i)), nil, safetyTimeout(t))
			t.Run(tt.Name+" from "+start, func(t *testing.T) {
				checkSchemeRedirect(t, out, tt.Status)
				if navs := relay.navigated()[navBefore:]; len(navs) != 0 {
					t.Errorf("the server was sent to %v, want nowhere", navs)
				}
			})
		}
	}
	getFixture(t).noViolations(t)
}

package fetch

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"downloader"
)

// TestRedirectToOtherScheme: a redirect to a URL of a scheme we never fetch (and a
// Location that is no URL) is the origin's bad answer (SPEC §4): http_status_error with
// the redirect's own status, reached, and nothing more is requested. The render's
// equivalent is render's TestRenderRedirectToOtherScheme.
func TestRedirectToOtherScheme(t *testing.T) {
	tests := []struct {
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
		{"mailto", http.StatusFound, "mailto:someone@site.test"},
		{"unknown scheme", http.StatusFound, "foo:bar"},
		{"not a URL", http.StatusFound, "http://[::1"},
		{"ftp 301", http.StatusMovedPermanently, "ftp://files.test/"},
		{"view-source 307", http.StatusTemporaryRedirect, "view-source:http://elsewhere.test/"},
		{"file 308", http.StatusPermanentRedirect, "file:///etc/passwd"},
		{"javascript 303", http.StatusSeeOther, "javascript:void(0)"},
	}
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
		if err != nil || i < 0 || i >= len(tests) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Location", tests[i].location)
		w.WriteHeader(tests[i].status)
	})
	e := newEnv(t, o)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(o.seen())
			u := "http://scheme.test/r/" + strconv.Itoa(i)
			out := e.fetch(deadline(t, 10*time.Second), u)
			if out.Cause != downloader.CauseHTTPStatus || out.FailReason != downloader.FailHTTPStatusError ||
				out.HTTPStatus != tt.status || !out.FailReason.HasReachedOrigin() || out.FinalURL != u {
				t.Errorf("cause=%s fail_reason=%q http_status=%d final_url=%s, want http_status_error %d reached at %s",
					out.Cause, out.FailReason, out.HTTPStatus, out.FinalURL, tt.status, u)
			}
			if seen := o.seen()[before:]; len(seen) != 1 {
				t.Errorf("the origin saw %v, want the one request", seen)
			}
		})
	}
	if hops := e.hops.admitted(); len(hops) != 0 {
		t.Errorf("hops admitted: %v, want none", hops)
	}
}

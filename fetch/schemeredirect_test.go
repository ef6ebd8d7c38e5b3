package fetch

import (
	"strconv"
	"testing"
	"time"

	"downloader"
	"downloader/internal/testkit"
)

// TestRedirectToOtherScheme: a redirect to a URL of a scheme we never fetch (and a
// Location that is no URL) is the origin's bad answer (SPEC §4): http_status_error with
// the redirect's own status, reached, and nothing more is requested. The render's
// equivalent is render's TestRenderRedirectToOtherScheme.
func TestRedirectToOtherScheme(t *testing.T) {
	o := newOrigin(t, testkit.SchemeRedirectPages)
	e := newEnv(t, o)
	for i, tt := range testkit.SchemeRedirects() {
		t.Run(tt.Name, func(t *testing.T) {
			before := len(o.seen())
			u := "http://scheme.test/r/" + strconv.Itoa(i)
			out := e.fetch(deadline(t, 10*time.Second), u)
			if out.Cause != downloader.CauseHTTPStatus || out.FailReason != downloader.FailHTTPStatusError ||
				out.HTTPStatus != tt.Status || !out.FailReason.HasReachedOrigin() || out.FinalURL != u {
				t.Errorf("cause=%s fail_reason=%q http_status=%d final_url=%s, want http_status_error %d reached at %s",
					out.Cause, out.FailReason, out.HTTPStatus, out.FinalURL, tt.Status, u)
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

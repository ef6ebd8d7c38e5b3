package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMisclassifiedAnswers covers two answers that were told wrong (SPEC §4): a URL naming
// a forbidden address through IDNA-mapped characters is the caller's mistake, a 400
// naming url like the plain literal; and a redirect whose Location is not a URL is the
// origin's bad answer, http_status_error with its 3xx status.
func TestMisclassifiedAnswers(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Location"] = []string{`http://127.1.1.1:80\@127.2.2.2:80/`}
		w.WriteHeader(http.StatusFound)
	}))
	defer origin.Close()
	s := startTestService(t, "--connect-to", "badlocation.test::"+strings.TrimPrefix(origin.URL, "http://"))

	for _, u := range []string{
		"http://127.0.0.1/",
		"http://①②⑦.⓪.⓪.①/",
		"http://127。0。0。1/",
		"http://１２７.０.０.１/",
		"http://①②⑦。①/",
		"http://⑩.⓪.⓪.①/",
		"http://ｌｏｃａｌｈｏｓｔ/",
	} {
		for _, entry := range []string{"/v1/probe", "/v1/render"} {
			resp, m := s.post(t, entry, fmt.Sprintf(`{"url":%q,"should_render":false}`, u))
			if resp.StatusCode != http.StatusBadRequest || m["field"] != "url" {
				t.Errorf("%s %s: %d %v, want 400 naming url", entry, u, resp.StatusCode, m)
			}
		}
	}

	resp, m := s.post(t, "/v1/probe", `{"url":"http://badlocation.test/","should_render":false,"min_interval_ms":0}`)
	if resp.StatusCode != http.StatusOK || m["fail_reason"] != "http_status_error" || m["http_status"] != float64(302) || m["has_reached_origin"] != true {
		t.Errorf("a 302 with an unparseable Location: %d %v, want http_status_error, 302, reached", resp.StatusCode, m)
	}
}

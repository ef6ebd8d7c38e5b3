package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzEntries: any body to B or C gets a JSON answer with a known status, never a panic or
// a 500; a 400 always names a field.
func FuzzEntries(f *testing.F) {
	for _, s := range []string{
		`{"url":"http://a.test/","min_interval_ms":0}`,
		`{"url":"http://a.test/","domain":"A.TEST.","should_render":false,"min_interval_ms":100}`,
		`{"url":"http://a.test/","render":true}`,
		`{"url":"http://[::1]:0/"}`,
		`{"url":"http://a.test/","min_interval_ms":1e99}`,
		`{"url":"http://a.test/","timeout_ms":-1,"should_store":true}`,
		`[1,2]`, `null`, `{"url":null}`, `{}`, ``, `{"url":"http://a.test/"}{}`,
	} {
		f.Add("/v1/probe", s)
		f.Add("/v1/render", s)
	}
	h := newHarness(f, &fakeFetcher{})
	f.Fuzz(func(t *testing.T, path, body string) {
		if path != "/v1/probe" {
			path = "/v1/render"
		}
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusTooManyRequests:
		case http.StatusBadRequest:
			if !strings.Contains(rec.Body.String(), `"field":"`) {
				t.Fatalf("400 without a field: %s", rec.Body.String())
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("content type %q", ct)
		}
	})
}

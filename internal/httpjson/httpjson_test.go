package httpjson

import (
	"net/http/httptest"
	"testing"

	"downloader"
)

func TestWrite(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status int
		v      any
		want   string
	}{
		{"error with field", 400, ErrorBody{Error: "url must be absolute", Field: "url"}, `{"error":"url must be absolute","field":"url"}` + "\n"},
		{"error without field", 503, ErrorBody{Error: "shutting down"}, `{"error":"shutting down"}` + "\n"},
		{"no HTML escaping", 200, map[string]string{"html": "<p>a & b</p>"}, `{"html":"<p>a & b</p>"}` + "\n"},
	} {
		rec := httptest.NewRecorder()
		Write(rec, tt.status, tt.v)
		if rec.Code != tt.status || rec.Body.String() != tt.want || rec.Header().Get("Content-Type") != "application/json; charset=utf-8" {
			t.Errorf("%s: %d %q %q, want %d %q", tt.name, rec.Code, rec.Header().Get("Content-Type"), rec.Body.String(), tt.status, tt.want)
		}
	}
}

func TestStatus(t *testing.T) {
	for code, want := range map[string]int{
		downloader.EINVALID: 400, downloader.ENOTFOUND: 404, downloader.EUNAVAILABLE: 503,
		downloader.EINTERNAL: 500, "": 500, "something else": 500,
	} {
		if got := Status(code); got != want {
			t.Errorf("Status(%q) = %d, want %d", code, got, want)
		}
	}
}

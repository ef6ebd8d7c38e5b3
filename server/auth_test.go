package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAccessPolicy(t *testing.T) {
	h := newHarness(t, &fakeFetcher{})
	srv := New(Config{Engine: h.eng, Clock: h.clk, APIToken: "api-secret", AdminToken: "admin-secret",
		Extra: func(mux *http.ServeMux) {
			mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("console")) })
			mux.HandleFunc("POST /console/settings", func(w http.ResponseWriter, r *http.Request) {})
		}})
	probe := `{"url":"http://a.test/","min_interval_ms":0}`
	tests := []struct {
		method, path, body, token string
		want                      int
	}{
		{"GET", "/healthz", "", "", 200},
		{"GET", "/", "", "", 200},
		{"POST", "/v1/probe", probe, "", 401},
		{"POST", "/v1/probe", probe, "wrong", 401},
		{"POST", "/v1/probe", probe, "api-secret", 200},
		{"POST", "/v1/probe", probe, "admin-secret", 200},
		{"GET", "/v1/settings", "", "", 401},
		{"GET", "/v1/settings", "", "api-secret", 200},
		{"PUT", "/v1/settings", `{"max_concurrent_count":3}`, "api-secret", 401},
		{"PUT", "/v1/settings", `{"max_concurrent_count":3}`, "admin-secret", 200},
		{"POST", "/console/settings", "", "api-secret", 401},
		{"POST", "/console/settings", "", "admin-secret", 200},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
		if tt.token != "" {
			req.Header.Set("Authorization", "Bearer "+tt.token)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Errorf("%s %s with %q: %d, want %d (%s)", tt.method, tt.path, tt.token, rec.Code, tt.want, rec.Body.String())
		}
		if rec.Code == 401 && !strings.Contains(rec.Body.String(), `"field":"authorization"`) {
			t.Errorf("401 body %s", rec.Body.String())
		}
	}
	// Only an admin token: the API is open, settings are not.
	srv = New(Config{Engine: h.eng, Clock: h.clk, AdminToken: "admin-secret"})
	for _, tt := range []struct {
		method, path, body string
		want               int
	}{{"POST", "/v1/probe", probe, 200}, {"PUT", "/v1/settings", `{"max_concurrent_count":3}`, 401}} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
		if rec.Code != tt.want {
			t.Errorf("admin-only %s %s: %d, want %d", tt.method, tt.path, rec.Code, tt.want)
		}
	}
}

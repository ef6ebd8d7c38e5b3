package server

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// consoleRoutes stand in for the console (package console registers the real ones).
func consoleRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("console shop.example.jp")) })
	mux.HandleFunc("GET /probes", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("http://shop.example.jp/")) })
	mux.HandleFunc("GET /assets/console.css", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("body{}")) })
	mux.HandleFunc("POST /console/settings", func(w http.ResponseWriter, r *http.Request) {
		role, _ := Session(r)
		w.Write([]byte("changed by " + role + " to " + r.PostFormValue("max_concurrent_count")))
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("downloader_in_flight_count 0\n")) })
}

func TestAccessPolicy(t *testing.T) {
	h := newHarness(t, &fakeFetcher{})
	srv := New(Config{Probe: h.eng, Render: h.eng, Settings: h.eng, Domains: h.lim, Slots: h.gate, Clock: h.clk, APIToken: "api-secret", AdminToken: "admin-secret", Extra: consoleRoutes})
	probe := `{"url":"http://a.test/","min_interval_ms":0}`
	tests := []struct {
		method, path, body, token string
		want                      int
	}{
		{"GET", "/healthz", "", "", 200},
		{"GET", "/metrics", "", "", 200}, // no metrics token: open
		{"GET", "/signin", "", "", 200},
		{"GET", "/assets/console.css", "", "", 200},
		{"GET", "/", "", "", 303}, // to the sign-in page
		{"GET", "/probes", "", "wrong", 303},
		{"GET", "/", "", "api-secret", 200},
		{"GET", "/probes", "", "admin-secret", 200},
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
		if rec.Code == 303 {
			if loc := rec.Header().Get("Location"); loc != "/signin?next="+url.QueryEscape(tt.path) {
				t.Errorf("%s redirects to %q", tt.path, loc)
			}
			if strings.Contains(rec.Body.String(), "example") {
				t.Errorf("%s before signing in shows %q", tt.path, rec.Body.String())
			}
		}
	}
	// Only an admin token: the API is open, settings are not.
	srv = New(Config{Probe: h.eng, Render: h.eng, Settings: h.eng, Domains: h.lim, Slots: h.gate, Clock: h.clk, AdminToken: "admin-secret"})
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

func TestMetricsToken(t *testing.T) {
	h := newHarness(t, &fakeFetcher{})
	srv := New(Config{Probe: h.eng, Render: h.eng, Settings: h.eng, Domains: h.lim, Slots: h.gate, Clock: h.clk, MetricsToken: "scrape-secret", APIToken: "api-secret", AdminToken: "admin-secret", Extra: consoleRoutes})
	for _, tt := range []struct {
		token string
		want  int
	}{{"", 401}, {"api-secret", 401}, {"admin-secret", 401}, {"scrape-secret", 200}} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if tt.token != "" {
			req.Header.Set("Authorization", "Bearer "+tt.token)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Errorf("/metrics with %q: %d, want %d", tt.token, rec.Code, tt.want)
		}
	}
	// The console links to /metrics: a signed-in operator reads it with the session alone;
	// a forged or expired cookie does not.
	cookie := signIn(t, srv, "api-secret", "/").Result().Cookies()[0]
	for _, tt := range []struct {
		name  string
		value string
		want  int
	}{{"session", cookie.Value, 200}, {"forged", "api.99999999999.AAAA", 401}} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.AddCookie(&http.Cookie{Name: SessionCookie, Value: tt.value})
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Errorf("/metrics with a %s cookie: %d, want %d", tt.name, rec.Code, tt.want)
		}
	}
	h.clk.Advance(SessionTTL + time.Minute)
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.AddCookie(cookie)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if rec.Code != 401 {
		t.Errorf("/metrics with an expired session: %d, want 401", rec.Code)
	}
}

// signIn posts token to /signin from the service's own page and returns the answer.
func signIn(t *testing.T, srv http.Handler, token, next string) *httptest.ResponseRecorder {
	t.Helper()
	form := url.Values{"token": {token}, "next": {next}}
	req := httptest.NewRequest("POST", "/signin", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

func TestSignIn(t *testing.T) {
	h := newHarness(t, &fakeFetcher{})
	srv := New(Config{Probe: h.eng, Render: h.eng, Settings: h.eng, Domains: h.lim, Slots: h.gate, Clock: h.clk, APIToken: "api-secret", AdminToken: "admin-secret", Extra: consoleRoutes})

	if rec := signIn(t, srv, "wrong", "/probes"); rec.Code != 401 || len(rec.Result().Cookies()) != 0 ||
		!strings.Contains(rec.Body.String(), "wrong token") {
		t.Fatalf("a wrong token: %d %v", rec.Code, rec.Result().Cookies())
	}
	for _, tt := range []struct{ next, want string }{
		{"/probes?limit=5", "/probes?limit=5"}, {"//evil.example/", "/"}, {`/\evil.example`, "/"},
		{"https://evil.example/", "/"}, {"", "/"},
	} {
		rec := signIn(t, srv, "api-secret", tt.next)
		if rec.Code != 303 || rec.Header().Get("Location") != tt.want {
			t.Errorf("sign in, next %q: %d to %q, want 303 to %q", tt.next, rec.Code, rec.Header().Get("Location"), tt.want)
		}
	}
	rec := signIn(t, srv, "api-secret", "/")
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies %v", cookies)
	}
	c := cookies[0]
	if c.Name != SessionCookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" ||
		strings.Contains(c.Value, "api-secret") {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, without the token", c)
	}
	if loc := rec.Header().Get("Location"); strings.Contains(loc, "secret") {
		t.Errorf("the token is in the redirect %q", loc)
	}
	get := func(path string, c *http.Cookie) int {
		req := httptest.NewRequest("GET", path, nil)
		req.AddCookie(c)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := get("/probes", c); code != 200 {
		t.Errorf("a console page with the session: %d", code)
	}
	if code := get("/v1/settings", c); code != 200 {
		t.Errorf("the read API with the session: %d", code)
	}
	forged := *c
	forged.Value = strings.Replace(c.Value, "api.", "admin.", 1)
	if code := get("/", &forged); code != 303 {
		t.Errorf("a session whose role was edited: %d, want 303", code)
	}
	h.clk.Advance(SessionTTL)
	if code := get("/", c); code != 303 {
		t.Errorf("an expired session: %d, want 303", code)
	}
	// A changed token ends the sessions made from the old one.
	rec = signIn(t, srv, "api-secret", "/")
	c = rec.Result().Cookies()[0]
	other := New(Config{Probe: h.eng, Render: h.eng, Settings: h.eng, Domains: h.lim, Slots: h.gate, Clock: h.clk, APIToken: "new-api-secret", AdminToken: "admin-secret", Extra: consoleRoutes})
	req := httptest.NewRequest("GET", "/", nil)
	req.AddCookie(c)
	rr := httptest.NewRecorder()
	other.ServeHTTP(rr, req)
	if rr.Code != 303 {
		t.Errorf("a session of a token that changed: %d, want 303", rr.Code)
	}

	// Without tokens the sign-in page says the console is open, and / is served.
	open := New(Config{Probe: h.eng, Render: h.eng, Settings: h.eng, Domains: h.lim, Slots: h.gate, Clock: h.clk, Extra: consoleRoutes})
	rr = httptest.NewRecorder()
	open.ServeHTTP(rr, httptest.NewRequest("GET", "/signin", nil))
	if rr.Code != 200 || !strings.Contains(rr.Body.String(), "No token is configured") {
		t.Errorf("sign-in page without tokens: %d %s", rr.Code, rr.Body.String())
	}
	rr = httptest.NewRecorder()
	open.ServeHTTP(rr, httptest.NewRequest("GET", "/", nil))
	if rr.Code != 200 {
		t.Errorf("/ without tokens: %d", rr.Code)
	}
}

// TestCrossSiteWritesAreRefused: the cap form (POST /console/settings) with a valid admin
// session is refused from another site or without the session's CSRF token; a bearer
// token (which no page can make a browser send) needs neither.
func TestCrossSiteWritesAreRefused(t *testing.T) {
	h := newHarness(t, &fakeFetcher{})
	srv := New(Config{Probe: h.eng, Render: h.eng, Settings: h.eng, Domains: h.lim, Slots: h.gate, Clock: h.clk, APIToken: "api-secret", AdminToken: "admin-secret", Extra: consoleRoutes})
	admin := signIn(t, srv, "admin-secret", "/").Result().Cookies()[0]
	api := signIn(t, srv, "api-secret", "/").Result().Cookies()[0]
	csrfOfCookie := func(c *http.Cookie) string {
		var got string
		probe := New(Config{Probe: h.eng, Render: h.eng, Settings: h.eng, Domains: h.lim, Slots: h.gate, Clock: h.clk, APIToken: "api-secret", AdminToken: "admin-secret",
			Extra: func(mux *http.ServeMux) {
				mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { _, got = Session(r) })
			}})
		req := httptest.NewRequest("GET", "/", nil)
		req.AddCookie(c)
		probe.ServeHTTP(httptest.NewRecorder(), req)
		return got
	}
	adminCSRF, apiCSRF := csrfOfCookie(admin), csrfOfCookie(api)
	if adminCSRF == "" || adminCSRF == apiCSRF {
		t.Fatalf("CSRF tokens %q and %q", adminCSRF, apiCSRF)
	}
	tests := []struct {
		name           string
		cookie         *http.Cookie
		bearer, csrf   string
		site, origin   string
		want           int
		wantBodyPrefix string
	}{
		{"the console's own form", admin, "", adminCSRF, "same-origin", "http://example.com", 200, "changed by admin"},
		{"Origin only (no Sec-Fetch-Site)", admin, "", adminCSRF, "", "http://example.com", 200, "changed by admin"},
		{"from another site", admin, "", adminCSRF, "cross-site", "http://evil.example", 403, ""},
		{"from another port of the same host", admin, "", adminCSRF, "same-site", "http://example.com:8081", 403, ""},
		{"another origin, no Sec-Fetch-Site", admin, "", adminCSRF, "", "http://evil.example", 403, ""},
		{"without the CSRF token", admin, "", "", "same-origin", "http://example.com", 403, ""},
		{"with another session's CSRF token", admin, "", apiCSRF, "same-origin", "http://example.com", 403, ""},
		{"a read session", api, "", apiCSRF, "same-origin", "http://example.com", 401, ""},
		{"the admin bearer token", nil, "admin-secret", "", "", "", 200, "changed by "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			form := url.Values{"max_concurrent_count": {"3"}}
			if tt.csrf != "" {
				form.Set("csrf_token", tt.csrf)
			}
			req := httptest.NewRequest("POST", "http://example.com/console/settings", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tt.cookie != nil {
				req.AddCookie(tt.cookie)
			}
			if tt.bearer != "" {
				req.Header.Set("Authorization", "Bearer "+tt.bearer)
			}
			if tt.site != "" {
				req.Header.Set("Sec-Fetch-Site", tt.site)
			}
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			if rec.Code != tt.want || !strings.HasPrefix(rec.Body.String(), tt.wantBodyPrefix) {
				t.Errorf("%d %q, want %d %q", rec.Code, rec.Body.String(), tt.want, tt.wantBodyPrefix)
			}
		})
	}
	// The same origin rule holds with no token configured (the console open on loopback).
	open := New(Config{Probe: h.eng, Render: h.eng, Settings: h.eng, Domains: h.lim, Slots: h.gate, Clock: h.clk, Extra: consoleRoutes})
	for site, want := range map[string]int{"cross-site": 403, "same-site": 403, "same-origin": 200} {
		req := httptest.NewRequest("POST", "/console/settings", strings.NewReader("max_concurrent_count=3"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", site)
		rec := httptest.NewRecorder()
		open.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("no tokens, Sec-Fetch-Site %s: %d, want %d", site, rec.Code, want)
		}
	}
}

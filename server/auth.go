package server

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// The access policy, applied in front of every route (routes.go and Config.Extra alike):
//
//	/healthz, /readyz, /metrics             open
//	GET, HEAD of the console pages          open (read-only views)
//	GET, HEAD under /v1/                    the API token or the admin token
//	PUT /v1/settings, other console writes  the admin token
//	other writes (entries B and C, tasks)   the API token or the admin token
//
// A token that is not configured is not required. Tokens are bearer tokens compared in
// constant time.
func (s *Server) authorize(next http.Handler) http.Handler {
	api, admin := s.cfg.APIToken, s.cfg.AdminToken
	if api == "" && admin == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		need := accessNeeded(r.Method, r.URL.Path)
		got := bearer(r)
		ok := true
		switch need {
		case accessAPI:
			ok = api == "" || tokenIs(got, api) || tokenIs(got, admin)
		case accessAdmin:
			ok = admin == "" || tokenIs(got, admin)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="downloader"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: "a valid bearer token is required", Field: "authorization"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

type access int

const (
	accessOpen access = iota
	accessAPI
	accessAdmin
)

func accessNeeded(method, path string) access {
	switch path {
	case "/healthz", "/readyz", "/metrics":
		return accessOpen
	}
	read := method == http.MethodGet || method == http.MethodHead
	switch {
	case read && strings.HasPrefix(path, "/v1/"):
		return accessAPI
	case read:
		return accessOpen
	case path == "/v1/settings":
		return accessAdmin
	case path == "/v1/probe", path == "/v1/render", path == "/v1/tasks":
		return accessAPI
	}
	return accessAdmin
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) > len(prefix) && strings.EqualFold(h[:len(prefix)], prefix) {
		return strings.TrimSpace(h[len(prefix):])
	}
	return ""
}

// tokenIs compares in constant time; an empty want never matches.
func tokenIs(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

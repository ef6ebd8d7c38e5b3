package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The access policy, applied in front of every route (routes.go and Config.Extra alike):
//
//	/healthz, /readyz                        open
//	/metrics                                 open; the metrics token when one is set
//	/signin, /signout, /assets/              open (the sign-in page and its stylesheet)
//	GET, HEAD of the console pages           the API token or the admin token
//	GET, HEAD under /v1/                     the API token or the admin token
//	POST /v1/probe, /v1/render, /v1/tasks    the API token or the admin token
//	PUT /v1/settings, POST /console/..., the rest   the admin token
//
// A token that is not configured is not required: without --api-token and
// --admin-token (loopback only, or --allow-unauthenticated) everything above is open, as
// before. Tokens are bearer tokens compared in constant time.
//
// A browser signs in instead (POST /signin with the token in the form body, never in a
// URL): the answer sets an HttpOnly, SameSite=Strict session cookie that counts like the
// token it was made from, until it expires (SessionTTL) or that token changes. A console
// page asked for without either is a redirect to the sign-in page, so no domain or URL is
// shown before signing in.
//
// Cross-site requests: a write that carries no bearer token must come from the service's
// own origin (Sec-Fetch-Site same-origin, or an Origin naming this host), even with no
// token configured, since a cross-site form post is a request any web page can make the
// operator's browser send. A write made with a session must also carry the session's
// CSRF token (the X-CSRF-Token header or the csrf_token form field), which only the
// service's own pages know.
func (s *Server) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		need := accessNeeded(r.Method, r.URL.Path)
		if need == accessMetrics {
			// The console's signed-in operator reads it too (its layout links here): a
			// session cookie is SameSite=Strict, so no other site can make a browser send it.
			if s.cfg.MetricsToken != "" && !tokenIs(bearer(r), s.cfg.MetricsToken) {
				if _, signedIn := s.sessionOf(r); !signedIn {
					unauthorized(w)
					return
				}
			}
			next.ServeHTTP(w, r)
			return
		}
		write := r.Method != http.MethodGet && r.Method != http.MethodHead
		got := bearer(r)
		if write && got == "" && !isSameOrigin(r) {
			writeJSON(w, http.StatusForbidden, errorBody{Error: "a cross-site request may not change anything", Field: "origin"})
			return
		}
		role := s.roleOf(got)
		sess, hasSession := s.sessionOf(r)
		if hasSession {
			r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess))
		}
		if role == roleNone && hasSession && got == "" {
			if write && !hmac.Equal([]byte(csrfOf(w, r)), []byte(sess.csrf)) {
				writeJSON(w, http.StatusForbidden, errorBody{Error: "the console's CSRF token is missing or wrong: reload the page", Field: "csrf_token"})
				return
			}
			role = sess.role
		}
		if !s.allows(need, role) {
			if need == accessRead && !strings.HasPrefix(r.URL.Path, "/v1/") && !write {
				http.Redirect(w, r, "/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			unauthorized(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="downloader"`)
	writeJSON(w, http.StatusUnauthorized, errorBody{Error: "a valid bearer token is required", Field: "authorization"})
}

type access int

const (
	accessOpen access = iota
	accessMetrics
	accessRead // the API token or the admin token
	accessAdmin
)

func accessNeeded(method, path string) access {
	switch path {
	case "/healthz", "/readyz", "/signin", "/signout":
		return accessOpen
	case "/metrics":
		return accessMetrics
	}
	read := method == http.MethodGet || method == http.MethodHead
	switch {
	case read && strings.HasPrefix(path, "/assets/"):
		return accessOpen
	case read:
		return accessRead
	case path == "/v1/probe", path == "/v1/render", path == "/v1/tasks":
		return accessRead
	}
	return accessAdmin
}

// role is what a credential opens.
type role string

const (
	roleNone  role = ""
	roleAPI   role = "api"
	roleAdmin role = "admin"
)

// roleOf returns the role of a bearer token ("" matches nothing).
func (s *Server) roleOf(token string) role {
	switch {
	case tokenIs(token, s.cfg.AdminToken):
		return roleAdmin
	case tokenIs(token, s.cfg.APIToken):
		return roleAPI
	}
	return roleNone
}

// allows tells whether role meets need; a token that is not configured is not required.
func (s *Server) allows(need access, r role) bool {
	api, admin := s.cfg.APIToken, s.cfg.AdminToken
	switch need {
	case accessRead:
		// Only an admin token: the API and the pages stay open, as the API always was.
		return api == "" || r == roleAPI || r == roleAdmin
	case accessAdmin:
		return admin == "" || r == roleAdmin
	}
	return true
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

// isSameOrigin tells whether a browser sent r from the service's own pages. Browsers
// send Sec-Fetch-Site (and Origin) with every write; a client that sends neither is not
// a browser, and no web page can make a browser omit them.
func isSameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none" // none: typed by the user, not sent by a page
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// csrfOf returns the CSRF token a write carries.
func csrfOf(w http.ResponseWriter, r *http.Request) string {
	if h := r.Header.Get("X-CSRF-Token"); h != "" {
		return h
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		return r.PostFormValue("csrf_token")
	}
	return ""
}

// maxFormBytes bounds a form body (sign-in, the console's forms).
const maxFormBytes = 64 << 10

// Sessions.

// SessionCookie is the name of the console's session cookie.
const SessionCookie = "downloader_session"

// SessionTTL is how long a sign-in lasts.
const SessionTTL = 12 * time.Hour

type sessionKey struct{}

type session struct {
	role role
	csrf string
}

// Session returns the role ("api" or "admin") of the session r was authorized with and
// its CSRF token, for the console's forms; "" and "" without a session.
func Session(r *http.Request) (roleName, csrfToken string) {
	s, ok := r.Context().Value(sessionKey{}).(session)
	if !ok {
		return "", ""
	}
	return string(s.role), s.csrf
}

// sessionValue is the cookie of role valid until expires: role.expires.mac, where mac is
// an HMAC of both keyed with the role's token. It holds no token, survives a restart and
// dies when the token changes.
func (s *Server) sessionValue(r role, expires time.Time) string {
	payload := string(r) + "." + strconv.FormatInt(expires.Unix(), 10)
	return payload + "." + mac(s.tokenOf(r), "session\x00"+payload)
}

func (s *Server) tokenOf(r role) string {
	switch r {
	case roleAdmin:
		return s.cfg.AdminToken
	case roleAPI:
		return s.cfg.APIToken
	}
	return ""
}

func mac(key, msg string) string {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// sessionOf checks r's session cookie.
func (s *Server) sessionOf(r *http.Request) (session, bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return session{}, false
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 3 {
		return session{}, false
	}
	ro := role(parts[0])
	key := s.tokenOf(ro)
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if key == "" || err != nil || !s.cfg.Clock.Now().Before(time.Unix(exp, 0)) {
		return session{}, false
	}
	payload := parts[0] + "." + parts[1]
	if !hmac.Equal([]byte(parts[2]), []byte(mac(key, "session\x00"+payload))) {
		return session{}, false
	}
	return session{role: ro, csrf: mac(key, "csrf\x00"+c.Value)}, true
}

package server

import (
	"fmt"
	"net/http"
	"strings"

	"downloader/internal/httpjson"
)

// jsonMuxErrors answers the mux's own errors, a 404 (no route) and a 405 (a route, not for
// this method), with the JSON error body every other error has, instead of the mux's
// plain text. A request the mux routes is passed through untouched, with no wrapper.
func jsonMuxErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(&muxErrorWriter{ResponseWriter: w, r: r}, r)
	})
}

// muxErrorWriter replaces a plain-text error of the mux by a JSON one.
type muxErrorWriter struct {
	http.ResponseWriter
	r          *http.Request
	isReplaced bool
}

func (m *muxErrorWriter) WriteHeader(code int) {
	h := m.Header()
	if (code != http.StatusNotFound && code != http.StatusMethodNotAllowed) || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		m.ResponseWriter.WriteHeader(code)
		return
	}
	m.isReplaced = true
	msg := fmt.Sprintf("no such path: %s", m.r.URL.Path)
	if code == http.StatusMethodNotAllowed {
		msg = fmt.Sprintf("method %s not allowed on %s (allowed: %s)", m.r.Method, m.r.URL.Path, h.Get("Allow"))
	}
	h.Del("X-Content-Type-Options")
	httpjson.Write(m.ResponseWriter, code, errorBody{Error: msg})
}

func (m *muxErrorWriter) Write(p []byte) (int, error) {
	if m.isReplaced {
		return len(p), nil // the mux's text, already answered as JSON
	}
	return m.ResponseWriter.Write(p)
}

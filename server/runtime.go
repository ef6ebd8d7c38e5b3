package server

import (
	"net/http"

	"downloader"
)

func (s *Server) handleGetSettings() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.cfg.Settings.Settings())
	})
}

// settingsRequest requires max_concurrent_count: it is the only setting.
type settingsRequest struct {
	MaxConcurrentCount *int `json:"max_concurrent_count"`
}

func (s *Server) handlePutSettings() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body settingsRequest
		if err := decode(w, r, &body); err != nil {
			s.writeError(w, r, err)
			return
		}
		if body.MaxConcurrentCount == nil {
			s.writeError(w, r, downloader.Invalidf("max_concurrent_count", "max_concurrent_count is required"))
			return
		}
		if _, err := s.cfg.Settings.SetSettings(r.Context(), downloader.Settings{MaxConcurrentCount: *body.MaxConcurrentCount}, actor(r)); err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, s.cfg.Settings.Settings())
	})
}

// actor names who made a change, for the log.
func actor(r *http.Request) string {
	if a := r.Header.Get("X-Actor"); a != "" && len(a) <= 64 {
		return a + "@" + r.RemoteAddr
	}
	return r.RemoteAddr
}

func (s *Server) handleHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

func (s *Server) handleReadyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.isDraining() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "stopping"})
			return
		}
		if !s.ready.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
}

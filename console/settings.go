package console

import (
	"net/http"
	"strconv"
	"strings"

	"downloader"
	"downloader/internal/httpjson"
)

// settingsForm is the max_concurrent_count control (POST /console/settings, form-encoded:
// max_concurrent_count, actor, csrf_token). It needs the admin token, as PUT /v1/settings
// does: the server's access policy (server/auth.go) lets it through only with the admin
// bearer token, or an admin session with its CSRF token from the service's own origin.
// It answers the settings as JSON, as PUT /v1/settings does.
func (c *Console) settingsForm() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "the form could not be read", Field: "max_concurrent_count"})
			return
		}
		n, err := strconv.Atoi(strings.TrimSpace(r.PostForm.Get("max_concurrent_count")))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "max_concurrent_count must be a whole number", Field: "max_concurrent_count"})
			return
		}
		if _, err := c.cfg.Settings.SetSettings(r.Context(), downloader.Settings{MaxConcurrentCount: n}, formActor(r)); err != nil {
			status := httpjson.Status(downloader.ErrorCode(err))
			if status == http.StatusInternalServerError {
				c.log.Error("console settings", "error", err)
			}
			writeJSON(w, status, errorBody{Error: downloader.ErrorMessage(err), Field: downloader.ErrorField(err)})
			return
		}
		writeJSON(w, http.StatusOK, c.cfg.Settings.Settings())
	})
}

// formActor names who made a change for the log: the operator's name from the form, if
// any, and the address the request came from.
func formActor(r *http.Request) string {
	a := strings.TrimSpace(r.PostForm.Get("actor"))
	if a != "" && len(a) <= 64 {
		return a + "@" + r.RemoteAddr
	}
	return r.RemoteAddr
}

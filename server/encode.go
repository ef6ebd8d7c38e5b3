package server

import (
	"net/http"

	"downloader"
	"downloader/internal/httpjson"
)

// errorBody and writeJSON are the service's one error body and JSON answer (httpjson).
type errorBody = httpjson.ErrorBody

func writeJSON(w http.ResponseWriter, status int, v any) { httpjson.Write(w, status, v) }

// writeError answers err: its code picks the status, its message and field are safe to show;
// anything else is logged and answered with a generic 500.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := downloader.ErrorCode(err)
	if code == downloader.EINTERNAL {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeJSON(w, httpjson.Status(code), errorBody{Error: downloader.ErrorMessage(err), Field: downloader.ErrorField(err)})
}

// decode reads one JSON object into v, strictly (httpjson.Unmarshal: exact field names, no
// unknown or duplicate field, no trailing data; a body over the limit): every error is
// EINVALID naming the field.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return httpjson.DecodeBody(w, r, v)
}

// cursorOf is a list's next_cursor as every list answers it (GET /v1/tasks,
// /v1/fetch_results, the console's domain table): the opaque cursor of the next page, or
// null after the last page, never "" (one convention, README "API").
func cursorOf(next string) *string {
	if next == "" {
		return nil
	}
	return &next
}

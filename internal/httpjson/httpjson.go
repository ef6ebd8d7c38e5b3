// Package httpjson writes the service's JSON answers: one encoding (UTF-8, no HTML
// escaping) and one error body, {"error", "field"}, for the API and the console alike.
package httpjson

import (
	"encoding/json"
	"net/http"

	"downloader"
)

// ErrorBody is every 4xx/5xx answer's body: what went wrong, and the request field it is
// about when there is one.
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// Write answers v as JSON with status.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// Status maps the root error codes to HTTP statuses; it is the only such map, shared by
// the API and the console: EINVALID 400, ENOTFOUND 404, EUNAVAILABLE 503, anything else
// 500.
func Status(code string) int {
	switch code {
	case downloader.EINVALID:
		return http.StatusBadRequest
	case downloader.ENOTFOUND:
		return http.StatusNotFound
	case downloader.EUNAVAILABLE:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Package httpjson writes the service's JSON answers: one encoding (UTF-8, no HTML
// escaping) and one error body, {"error", "field"}, for the API and the console alike.
package httpjson

import (
	"encoding/json"
	"net/http"
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

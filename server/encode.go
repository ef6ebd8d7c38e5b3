package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"downloader"
	"downloader/internal/httpjson"
)

// maxBodyBytes bounds every request body.
const maxBodyBytes = 1 << 20

// errorBody and writeJSON are the service's one error body and JSON answer (httpjson).
type errorBody = httpjson.ErrorBody

func writeJSON(w http.ResponseWriter, status int, v any) { httpjson.Write(w, status, v) }

// httpStatus maps the root error codes to HTTP statuses; it is the only such map.
func httpStatus(code string) int {
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

// writeError answers err: its code picks the status, its message and field are safe to show;
// anything else is logged and answered with a generic 500.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := downloader.ErrorCode(err)
	if code == downloader.EINTERNAL {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeJSON(w, httpStatus(code), errorBody{Error: downloader.ErrorMessage(err), Field: downloader.ErrorField(err)})
}

// decode reads one JSON object into v, strictly: a body over the limit, malformed JSON,
// an unknown field (so `render` instead of `should_render` is caught), a wrong type or
// trailing data are EINVALID errors naming the field.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return decodeError(err)
		}
		return downloader.Invalidf("body", "body must hold exactly one JSON object")
	}
	return nil
}

func decodeError(err error) error {
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		return downloader.Invalidf("body", "body is larger than %d bytes", maxBodyBytes)
	case errors.Is(err, io.EOF):
		return downloader.Invalidf("body", "body is empty: a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return downloader.Invalidf("body", "body is not complete JSON")
	case errors.As(err, &syntaxErr):
		return downloader.Invalidf("body", "body is not valid JSON at byte %d", syntaxErr.Offset)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return downloader.Invalidf("body", "body must be a JSON object")
		}
		return downloader.Invalidf(field, "%s must be a JSON %s, not %s", field, jsonKind(typeErr.Type.String()), typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		if field == "" {
			return downloader.Invalidf("body", "unknown field %q", field)
		}
		return downloader.Invalidf(field, "unknown field %q", field)
	}
	return downloader.Invalidf("body", "body cannot be decoded: %v", err)
}

func jsonKind(goType string) string {
	switch {
	case strings.Contains(goType, "int"), strings.Contains(goType, "float"):
		return "number"
	case strings.Contains(goType, "bool"):
		return "boolean"
	case strings.Contains(goType, "string"):
		return "string"
	}
	return fmt.Sprintf("value of type %s", goType)
}

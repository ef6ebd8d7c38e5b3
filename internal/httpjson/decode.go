package httpjson

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"downloader"
)

// MaxBodyBytes bounds every request body the API decodes.
const MaxBodyBytes = 1 << 20

// DecodeBody reads one JSON value from r's body into v with Unmarshal's rules; a body over
// MaxBodyBytes is an error naming "body".
func DecodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return downloader.Invalidf("body", "body is larger than %d bytes", MaxBodyBytes)
		}
		return downloader.Invalidf("body", "body cannot be read: %v", err)
	}
	return Unmarshal(b, v)
}

// Unmarshal decodes exactly one JSON value from b into v, strictly, as encoding/json/v2
// reads JSON: member names match the field names exactly (SPEC §7 names one spelling:
// "URL" is not url, as encoding/json's case-insensitive match would take it), and an
// unknown or duplicate member, invalid UTF-8 or trailing data is an error. Every error is
// EINVALID and names the field it is about ("body" for the document as a whole; a nested
// one as tasks[0].url).
func Unmarshal(b []byte, v any) error {
	if len(strings.TrimSpace(string(b))) == 0 {
		return downloader.Invalidf("body", "body is empty: a JSON object is required")
	}
	err := jsonv2.Unmarshal(b, v, jsonv2.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	var (
		semErr *jsonv2.SemanticError
		synErr *jsontext.SyntacticError
	)
	switch {
	case errors.As(err, &semErr):
		field := fieldOf(semErr.JSONPointer)
		if errors.Is(semErr.Err, jsonv2.ErrUnknownName) {
			if field == "" {
				return downloader.Invalidf("body", "unknown field")
			}
			return downloader.Invalidf(field, "unknown field %q (names are exact and case-sensitive, SPEC §7)", semErr.JSONPointer.LastToken())
		}
		if field == "" {
			return downloader.Invalidf("body", "body must be a JSON object")
		}
		if semErr.GoType != nil {
			return downloader.Invalidf(field, "%s must be a JSON %s, not %s", field, kindOf(semErr.GoType.String()), jsonKindName(semErr.JSONKind))
		}
		return downloader.Invalidf(field, "%s is invalid: %v", field, semErr.Err)
	case errors.As(err, &synErr):
		if errors.Is(synErr.Err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return downloader.Invalidf("body", "body is not complete JSON")
		}
		if field := fieldOf(synErr.JSONPointer); field != "" && strings.Contains(synErr.Err.Error(), "duplicate") {
			return downloader.Invalidf(field, "%s is given twice", field)
		}
		return downloader.Invalidf("body", "body is not valid JSON at byte %d: %v", synErr.ByteOffset, synErr.Err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return downloader.Invalidf("body", "body is not complete JSON")
	}
	return downloader.Invalidf("body", "body cannot be decoded: %v", err)
}

// fieldOf spells a JSON pointer as the API names a field: /tasks/0/url → tasks[0].url.
func fieldOf(p jsontext.Pointer) string {
	var sb strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil && sb.Len() > 0 {
			sb.WriteString("[" + tok + "]")
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(tok)
	}
	return sb.String()
}

func kindOf(goType string) string {
	switch {
	case strings.Contains(goType, "int"), strings.Contains(goType, "float"):
		return "number"
	case strings.Contains(goType, "bool"):
		return "boolean"
	case strings.Contains(goType, "string"):
		return "string"
	case strings.HasPrefix(goType, "[]"):
		return "array"
	}
	return "object"
}

func jsonKindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return fmt.Sprintf("%v", k)
}

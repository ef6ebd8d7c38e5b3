package downloader

import (
	"errors"
	"fmt"
)

// Error codes. The code→HTTP status map is internal/httpjson.Status alone.
const (
	EINVALID     = "invalid"     // the caller's input is wrong; Field names which part.
	ENOTFOUND    = "not_found"   // the thing asked for does not exist.
	EUNAVAILABLE = "unavailable" // a dependency of ours is down; try again later.
	EINTERNAL    = "internal"    // a bug or an unexpected failure; details only in the log.
)

// Error is the one error type the services return to callers. Message is safe to show.
type Error struct {
	Code    string
	Field   string // the request field at fault, for EINVALID
	Message string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("downloader error: code=%s field=%s message=%s", e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("downloader error: code=%s message=%s", e.Code, e.Message)
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalidf returns an EINVALID *Error naming field.
func Invalidf(field, format string, args ...any) *Error {
	return &Error{Code: EINVALID, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err if it is (or wraps) an *Error, EINTERNAL otherwise,
// and "" for nil.
func ErrorCode(err error) string {
	var e *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of err if it is an *Error; otherwise a generic message,
// so that internal details never reach a caller.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// ErrorField returns the field of err if it is an *Error.
func ErrorField(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}

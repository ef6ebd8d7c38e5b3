// Package retryafter reads an origin's Retry-After header (RFC 9110 §10.2.3) into the
// whole seconds the scheduler is told to wait (health_signal.retry_after_seconds). Plain
// fetches and renders share it, so that one header always gives one answer.
//
// The one rounding is up: the answer never tells the scheduler to come back before the
// origin asked.
package retryafter

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Seconds reads v, delay-seconds or an HTTP-date, as whole seconds from now:
//   - delay-seconds as sent; a number too large for int64 saturates at math.MaxInt64;
//   - an HTTP-date (any of the three forms http.ParseTime reads) as the time from now
//     to it, rounded up, and 0 for a date that has passed;
//   - nil when v is empty, negative or neither form.
//
// Spaces around v are ignored. The result is never negative.
func Seconds(v string, now time.Time) *int64 {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return nil
		}
		return &n
	} else if isDigits(v) {
		// Only digits, so the only error is the range: the origin asked for longer than
		// we can count.
		n := int64(math.MaxInt64)
		return &n
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return nil
	}
	return new(untilCeil(t, now))
}

// untilCeil is the whole seconds from now to t, rounded up, and 0 when t is not after
// now. It counts in Unix seconds, so dates centuries away neither overflow nor saturate
// the way time.Duration (±292 years) would.
func untilCeil(t, now time.Time) int64 {
	if !t.After(now) {
		return 0
	}
	secs := t.Unix() - now.Unix()
	nanos := t.Nanosecond() - now.Nanosecond()
	if nanos < 0 {
		secs--
		nanos += int(time.Second)
	}
	if nanos > 0 {
		secs++
	}
	return secs
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

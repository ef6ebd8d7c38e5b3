// Package retryafter reads an origin's Retry-After header (RFC 9110 §10.2.3) into the
// whole seconds the scheduler is told to wait (health_signal.retry_after_seconds). Plain
// fetches and renders share it, so that one header always gives one answer.
//
// The one rounding is up: the answer never tells the scheduler to come back before the
// origin asked. The one bound is MaxWait: an origin that asks for longer is answered with
// MaxWait, never with a number that wraps when it becomes a time (SPEC §2, the origin's
// own wait: saturating, capped at the longest wait the service honours).
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"downloader"
)

// MaxWait is the longest wait the service honours from an origin's Retry-After: a longer
// one is MaxWait, in health_signal.retry_after_seconds, in the limiter's hold of the
// domain and in the local queue's retry. It is the largest min_interval_ms the service
// accepts, so that one bound says how long the service keeps a domain waiting on anyone's
// word, and a limiter entry that can still refuse is at most that old (SPEC §2, loss and
// rebuild). Past it the scheduler, which owns domain health, decides.
const MaxWait = downloader.MaxMinInterval

// MaxWaitSeconds is MaxWait in whole seconds.
const MaxWaitSeconds = int64(MaxWait / time.Second)

// Seconds reads v, delay-seconds or an HTTP-date, as whole seconds from now, at most
// MaxWaitSeconds:
//   - delay-seconds as sent, and MaxWaitSeconds for any larger number, however many
//     digits it has;
//   - an HTTP-date (any of the three forms http.ParseTime reads) as the time from now
//     to it, rounded up, 0 for a date that has passed, MaxWaitSeconds for one further;
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
		return new(min(n, MaxWaitSeconds))
	} else if isDigits(v) {
		// Only digits, so the only error is the range: the origin asked for longer than
		// we can count, and far longer than we honour.
		return new(MaxWaitSeconds)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return nil
	}
	return new(min(untilCeil(t, now), MaxWaitSeconds))
}

// Duration is secs whole seconds as a time.Duration in [0, MaxWait]: a negative count is
// 0, and a count past MaxWait (up to math.MaxInt64, which a multiplication by time.Second
// would wrap to a negative or small wait) is MaxWait.
func Duration(secs int64) time.Duration {
	if secs <= 0 {
		return 0
	}
	return time.Duration(min(secs, MaxWaitSeconds)) * time.Second
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

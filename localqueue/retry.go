package localqueue

import (
	"math/rand/v2"
	"net/http"
	"time"

	"downloader"
	"downloader/retryafter"
)

// Retries. The local queue stands in for the scheduler (SPEC §1), so it follows the
// scheduler's table in seed 002 for what comes back:
//
//	has_reached_origin=false (our own problem)   retry in place: no backoff, no attempt
//	reached, transient (5xx, 408, 429, connect   retry after an exponential backoff with
//	  or response timeout, connection reset)     jitter, at least the origin's Retry-After,
//	                                             until MaxAttemptCount attempts
//	success, skip, or anything else              final
//
// "In place" keeps the domain's pacing: the task is first of its domain again and goes out
// at the domain's next slot, as a released task does. invalid_task is final although it is
// our own: the same task is just as invalid the next time. A failure of our own is retried
// at most MaxOwnFailureCount times, then final: without that bound a crawl whose browser
// cannot start would never end. A Retry-After holds the whole domain (the origin asked for
// it), a plain backoff only the task. A Retry-After longer than retryafter.MaxWait (an
// hour, the largest min_interval_ms) counts as that longest wait: the task and its domain
// wait an hour, never less because the number was too large to count (SPEC §2, the
// origin's own wait). A 429 or 503 without Retry-After holds the domain too, by the
// queue's own curve (pushback.go).

// Retry defaults.
const (
	DefaultMaxAttemptCount    = 3
	DefaultRetryBaseDelay     = 2 * time.Second
	DefaultRetryMaxDelay      = 10 * time.Minute
	DefaultMaxOwnFailureCount = 10
)

func (c *Config) retryDefaults() {
	if c.MaxAttemptCount <= 0 {
		c.MaxAttemptCount = DefaultMaxAttemptCount
	}
	if c.RetryBaseDelay <= 0 {
		c.RetryBaseDelay = DefaultRetryBaseDelay
	}
	if c.RetryMaxDelay <= 0 {
		c.RetryMaxDelay = DefaultRetryMaxDelay
	}
	if c.MaxOwnFailureCount <= 0 {
		c.MaxOwnFailureCount = DefaultMaxOwnFailureCount
	}
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
}

type retryAction int

const (
	actionFinish retryAction = iota
	actionRetryInPlace
	actionRetryLater
)

// retryDecision is what Report does with a task.
type retryDecision struct {
	action retryAction
	at     time.Time // actionRetryLater: next_attempt_at
	hold   time.Time // when set, no task of the domain before then (Retry-After)
}

// FailureClass sorts a report by the seeds' table: "final", "own" or "transient".
func FailureClass(r *downloader.Report) string {
	switch {
	case r.SkipReason != "" || r.FailReason == nil || *r.FailReason == "":
		return "final"
	case *r.FailReason == downloader.FailInvalidTask:
		return "final"
	case !r.FailReason.HasReachedOrigin():
		return "own"
	}
	switch *r.FailReason {
	case downloader.FailConnectTimeout, downloader.FailResponseTimeout, downloader.FailConnectionReset:
		return "transient"
	case downloader.FailHTTPStatusError:
		if r.HTTPStatus != nil {
			st := *r.HTTPStatus
			if st >= 500 || st == http.StatusTooManyRequests || st == http.StatusRequestTimeout {
				return "transient"
			}
		}
	}
	return "final"
}

// decide updates rec's attempt counts for the report r and says what to do with it. The
// origin's Retry-After on a transient failure holds the domain whatever becomes of the
// task (its last attempt too: the domain's other tasks must still wait), and the task
// comes back no earlier than it.
func (c *Config) decide(rec *queueRecord, r *downloader.Report, now time.Time) retryDecision {
	rec.NextAttemptAt = time.Time{}
	class := FailureClass(r)
	if class == "own" {
		rec.OwnFailureCount++
		if rec.OwnFailureCount > c.MaxOwnFailureCount {
			return retryDecision{action: actionFinish}
		}
		return retryDecision{action: actionRetryInPlace}
	}
	if r.SkipReason == "" && r.HasReachedOrigin {
		rec.AttemptCount++
	}
	var hold time.Time
	ra := originWait(r)
	if class == "transient" && ra > 0 {
		hold = now.Add(ra)
	}
	if class != "transient" || rec.AttemptCount >= c.MaxAttemptCount {
		return retryDecision{action: actionFinish, hold: hold}
	}
	return retryDecision{action: actionRetryLater, at: now.Add(max(c.backoff(rec.AttemptCount), ra)), hold: hold}
}

// originWait is the origin's Retry-After in r as a wait, 0 when it sent none. However
// large the reported number (a report from an older process may carry any int64), the
// wait is at most retryafter.MaxWait: saturated, never wrapped by the conversion to a
// time.Duration (SPEC §2, the origin's own wait).
func originWait(r *downloader.Report) time.Duration {
	if r.HealthSignal == nil || r.HealthSignal.RetryAfterSeconds == nil {
		return 0
	}
	return retryafter.Duration(*r.HealthSignal.RetryAfterSeconds)
}

// backoff is the wait after the attempt-th attempt: RetryBaseDelay doubled per attempt,
// at most RetryMaxDelay, of which the upper half is jitter ("equal jitter": never less
// than half the nominal wait, so that retries of many tasks spread without any coming
// back early).
func (c *Config) backoff(attempt int) time.Duration {
	d := c.RetryBaseDelay
	for i := 1; i < attempt && d < c.RetryMaxDelay; i++ {
		d *= 2
	}
	d = min(d, c.RetryMaxDelay)
	half := d / 2
	return half + time.Duration(c.Jitter()*float64(d-half))
}

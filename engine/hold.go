package engine

import (
	"net/http"

	"downloader"
	"downloader/retryafter"
)

// The origin's own wait (SPEC §2). A 429 or 503 with a Retry-After, from a plain fetch or
// a render's main document (both put it in health_signal.retry_after_seconds, already
// capped at retryafter.MaxWait), holds the domain that answered in the local limiter
// (limiter.HoldDomain) from the moment the answer is known: every entry's next request to
// it is refused or waits until then (B: 429 with the remaining wait, C: self_rate_limited
// with health_signal.retry_after_seconds, A: a slot after it, or the task handed back).
//
// In cluster mode the hold is the local limiter's, on the instance that saw the answer:
// the local admission comes first on every instance, so that instance holds the domain on
// all three entries; the other instances learn of the origin's wait only from their own
// requests (the shared record in TiKV does not carry it).

// holdForOrigin holds the domain that answered out, when the origin asked for a wait.
func (e *Engine) holdForOrigin(req downloader.Request, out *downloader.Outcome) {
	if out == nil || out.HealthSignal.RetryAfterSeconds == nil ||
		(out.HTTPStatus != http.StatusTooManyRequests && out.HTTPStatus != http.StatusServiceUnavailable) {
		return
	}
	wait := retryafter.Duration(*out.HealthSignal.RetryAfterSeconds)
	if wait <= 0 {
		return
	}
	e.cfg.Limiter.HoldDomain(e.cfg.Clock.Now(), answeringDomain(req, out), wait)
}

// answeringDomain is the canonical host of the URL that gave out's answer: after a
// redirect to another host, that host asked for the wait, not the request's.
func answeringDomain(req downloader.Request, out *downloader.Outcome) string {
	if out.FinalURL == "" || out.FinalURL == req.URL {
		return req.Domain
	}
	if _, d, err := downloader.ParseTargetURL("final_url", out.FinalURL); err == nil && d != "" {
		return d
	}
	return req.Domain
}

// refusalHealthSignal is entry C's health_signal when our limiter refused: nothing was
// measured, only the wait until the domain's next request may go (the interval's or the
// origin's), in whole seconds rounded up.
func refusalHealthSignal(ol *downloader.OverLimitError) *downloader.HealthSignal {
	if ol.Reason != downloader.FailSelfRateLimited {
		return nil
	}
	return &downloader.HealthSignal{RetryAfterSeconds: new(ol.RetryAfterSeconds())}
}

package engine

import (
	"context"
	"net/url"
	"time"

	"downloader"
)

// FetchUnstored runs one plain GET of u that a leased task t needs before it runs (its
// site's robots.txt, package robots) through the one admission pipeline (pipeline.go)
// under entry A's policy, like the task itself: the domain's slot at interval, reserved
// and waited for; the global cap; in cluster mode the shared admission; the request's hop
// admitter; the one decision of fail_reason with the egress verdict; the origin's
// Retry-After hold. SPEC §2: no request leaves without its host's admission, whoever
// asks for it. Nothing is stored (no fetch_result, no page) and no conditional request
// is made; the observers are told of it as a finished request of entry A carrying t's
// task_id, so that it is counted and logged like any request.
//
// The request must leave the task the time to run after it: its slot may be no later
// than t's lease expiry less two request timeouts (its own and the task's).
//
// It returns the outcome (http_status, the response headers, the body up to the
// fetcher's cap, fail_reason, has_reached_origin by it), or nil and when to come again
// when nothing was sent for our own reasons (a stop, a cancelled ctx, a slot past the
// deadline): the caller then hands t back.
func (e *Engine) FetchUnstored(ctx context.Context, t *downloader.Task, u *url.URL, interval time.Duration) (out *downloader.Outcome, retryAfter time.Duration) {
	now := e.cfg.Clock.Now()
	_, domain, err := downloader.ParseTargetURL("url", u.String())
	if err != nil {
		return downloader.FailedBy(downloader.CauseInvalidURL), 0
	}
	req := downloader.Request{URL: u.String(), Domain: domain, Entry: downloader.EntryLease,
		MinInterval: interval, IntervalSource: downloader.IntervalSourceLease, Timeout: e.cfg.DefaultTimeout}
	var deadline time.Time
	if !t.LeaseExpiresAt.IsZero() {
		deadline = t.LeaseExpiresAt.Add(-2 * req.Timeout)
		if !deadline.After(now) {
			return nil, handBackAfter
		}
	}
	p := e.pipeline(ctx, req, u, policyOf(req, t, deadline))
	if p.isHandedBack {
		return nil, p.retryAfter
	}
	e.observe(&downloader.Event{At: p.start, Entry: req.Entry, URL: req.URL, Domain: req.Domain,
		MinInterval: req.MinInterval, IntervalSource: req.IntervalSource, Summary: p.out.Summary(req.Domain),
		Duration: p.took, TaskID: t.TaskID})
	return p.out, 0
}

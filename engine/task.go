package engine

import (
	"context"
	"errors"
	"net/url"
	"time"

	"downloader"
)

// ValidateTask checks a leased task under the zero HeaderPolicy; it is
// downloader.ValidateLeasedTask, the one task validator, kept under this name for the
// callers that reach it through the engine.
func ValidateTask(t *downloader.Task) (*url.URL, downloader.Request, error) {
	return downloader.ValidateLeasedTask(t, downloader.HeaderPolicy{})
}

// RunTask runs one leased task through entry A: an invalid task is reported as
// invalid_task and never fetched; otherwise it goes through the admission pipeline
// (pipeline.go) with entry A's policy: it reserves the domain's next slot, and if that
// slot (plus the time the request may take) would outlive the lease, hands the task back
// at once; else it waits for the slot, then for a global slot, fetches or renders, and
// returns the report with the fetch_result (and the page when should_store) to store with
// it, unwritten (downloader.TaskEnd). A task stopped before anything was fetched, for our
// own reasons, is handed back.
func (e *Engine) RunTask(ctx context.Context, t *downloader.Task) downloader.LeaseReply {
	now := e.cfg.Clock.Now()
	u, req, err := downloader.ValidateLeasedTask(t, e.cfg.HeaderPolicy)
	if err != nil {
		return e.invalidTask(t, now, err)
	}
	req.Timeout = e.cfg.DefaultTimeout
	var deadline time.Time
	if !t.LeaseExpiresAt.IsZero() {
		deadline = t.LeaseExpiresAt.Add(-req.Timeout)
	}
	p := e.pipeline(ctx, req, u, policyOf(req, t, deadline))
	if p.isHandedBack {
		return downloader.LeaseReply{Release: true, RetryAfter: p.retryAfter}
	}
	return e.report(t, req, p.out, p.start)
}

func (e *Engine) invalidTask(t *downloader.Task, now time.Time, err error) downloader.LeaseReply {
	domain := t.Domain
	if _, d, perr := downloader.ParseTargetURL("url", t.URL); perr == nil {
		domain = d
	}
	e.log.Warn("invalid task", "task_id", t.TaskID, "url", t.URL, "domain", t.Domain, "error", downloader.ErrorMessage(err), "field", downloader.ErrorField(err))
	out := downloader.Failed(downloader.FailInvalidTask)
	req := downloader.Request{URL: t.URL, Domain: domain, Entry: downloader.EntryLease}
	return e.report(t, req, out, now)
}

// report returns the task's end (taskEnd) in the reply, unwritten: the lease loop commits
// the page, the fetch_result and the report in one write (downloader.TaskEnd).
func (e *Engine) report(t *downloader.Task, req downloader.Request, out *downloader.Outcome, start time.Time) downloader.LeaseReply {
	end := e.taskEnd(req, t.TaskID, out, start)
	e.observe(&downloader.Event{At: start, Entry: downloader.EntryLease, URL: t.URL, Domain: req.Domain, ShouldRender: req.ShouldRender,
		MinInterval: req.MinInterval, IntervalSource: req.IntervalSource, Summary: end.Report.Summary,
		Duration: e.cfg.Clock.Now().Sub(start), TaskID: t.TaskID})
	return downloader.LeaseReply{Report: end.Report, Page: end.Page, Result: end.Result}
}

func (e *Engine) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := e.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stopping.Done():
		return errors.New("shutting down")
	}
}

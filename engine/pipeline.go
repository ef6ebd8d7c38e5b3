package engine

import (
	"context"
	"errors"
	"net/url"
	"time"

	"downloader"
	"downloader/htmltext"
	"downloader/limiter"
)

// The admission pipeline, written once for the three entries (SPEC §2): the domain's
// admission → the render slot (renders) → the global cap → the shared admission (cluster
// mode) → run → done. Each step that cannot admit at once answers by the entry's policy.
// The request is in flight while it runs, not while its result is stored: the slot, the
// global cap and the domain's in-flight count are given back (in that order: admission,
// cap, render slot) before the entry stores and reports, so that slow synchronous writes
// do not hold other requests at the gate past their slots.

// policy is an entry's over-limit behaviour (SPEC §2's table), the one value that tells
// the pipeline's steps apart per entry.
type policy struct {
	// isWaiting: the domain's admission, and in cluster mode the shared one, reserve the
	// next slot and wait for it, up to deadline (entry A: waiting is cheaper than losing
	// the lease); and whatever stops the request before anything was fetched hands the
	// task back. Else (B, C) a step over its limit refuses at once.
	isWaiting bool
	// deadline is the latest slot entry A may wait for (the lease's expiry less the
	// request's timeout); zero: none.
	deadline time.Time
	// queue is how the global cap waits: B and C in the bounded local queue, A however
	// long it is (its tasks are already leased).
	queue limiter.QueueMode
	// isQueueFullRefused: a full render queue, or a request that came back
	// local_queue_full, is a refusal like a full global cap (B: HTTP 429); else (C) it is
	// answered as the outcome it is.
	isQueueFullRefused bool
	// task is entry A's task, for its events and logs.
	task *downloader.Task
	// isPaced: entry A's task came from a source that paces each domain itself
	// (Task.IsPaced, the local queue): its wait for the domain's slot is pacing, not an
	// over-limit event.
	isPaced bool
}

// policyOf returns the policy of req's entry; task is entry A's (nil for B and C).
func policyOf(req downloader.Request, task *downloader.Task, deadline time.Time) policy {
	switch req.Entry {
	case downloader.EntryLease:
		return policy{isWaiting: true, deadline: deadline, queue: limiter.QueueAlways, task: task,
			isPaced: task != nil && task.IsPaced}
	case downloader.EntryRender:
		return policy{queue: limiter.QueueBounded, isQueueFullRefused: true}
	}
	return policy{queue: limiter.QueueBounded}
}

func (p policy) taskID() string {
	if p.task == nil {
		return ""
	}
	return p.task.TaskID
}

// handBackAfter is when a task handed back for our own reasons (a stop, a full queue,
// a wait cut short) may come again: the real wait is unknown, and a second is about one
// mean service time.
const handBackAfter = time.Second

// passage is where a request's way through the pipeline ended.
type passage struct {
	// out is the fetch's or render's outcome when it ran; else why nothing was sent
	// (shutting_down, the render slot's failure) for B and C to answer.
	out *downloader.Outcome
	// refused (B, C) is a refusal over a limit: answered with HTTP 429 (B) or a summary
	// (C), and recorded as over limit.
	refused *downloader.OverLimitError
	// sharedErr (B, C): the shared runtime could not be reached; nothing was sent.
	sharedErr error
	// isHandedBack (A): nothing was fetched; the task goes back, to come again after
	// retryAfter, rather than failing for our reasons.
	isHandedBack bool
	retryAfter   time.Duration
	// at is the decision's time; start and took time the run (start is at when it did not run).
	at, start time.Time
	took      time.Duration
}

// notSent is the passage of a request stopped before anything was sent, for a reason
// that is not a limit: A hands the task back, B and C answer out.
func (p policy) notSent(at time.Time, out *downloader.Outcome) passage {
	if p.isWaiting {
		return passage{isHandedBack: true, retryAfter: handBackAfter, at: at, start: at}
	}
	return passage{out: out, at: at, start: at}
}

// overLimit is the passage of a request over a limit (reason self_rate_limited or
// local_queue_full): A hands the task back, B and C are refused.
func (p policy) overLimit(at time.Time, reason downloader.FailReason, wait time.Duration) passage {
	if p.isWaiting {
		return passage{isHandedBack: true, retryAfter: wait, at: at, start: at}
	}
	return passage{refused: &downloader.OverLimitError{Reason: reason, RetryAfter: wait}, at: at, start: at}
}

// pipeline takes req through every admission and runs it (see the top of this file).
func (e *Engine) pipeline(ctx context.Context, req downloader.Request, u *url.URL, pol policy) passage {
	now := e.cfg.Clock.Now()
	if e.isStopping() {
		return pol.notSent(now, downloader.Failed(downloader.FailShuttingDown))
	}
	adm, stop, ok := e.admitDomain(ctx, req, pol, now)
	if !ok {
		return stop
	}
	defer adm.Cancel()
	releaseSlot := func() {}
	if req.ShouldRender && e.cfg.Renderer != nil {
		var failed *downloader.Outcome
		if releaseSlot, failed = e.renderSlot(ctx, req); failed != nil {
			adm.Cancel()
			if failed.FailReason == downloader.FailLocalQueueFull && pol.isQueueFullRefused {
				return pol.overLimit(now, downloader.FailLocalQueueFull, queueFullRetryAfter)
			}
			return pol.notSent(now, failed)
		}
	}
	if err := e.cfg.Gate.Acquire(ctx, pol.queue); err != nil {
		releaseSlot()
		if errors.Is(err, limiter.ErrQueueFull) { // QueueBounded only
			adm.Cancel()
			return pol.overLimit(now, downloader.FailLocalQueueFull, queueFullRetryAfter)
		}
		return pol.notSent(now, downloader.Failed(downloader.FailShuttingDown))
	}
	released := false
	release := func() { // the slot and the in-flight count end with the request, not the store
		if !released {
			released = true
			adm.Cancel() // only completes the admission once the request went on the wire
			e.cfg.Gate.Release()
			releaseSlot()
		}
	}
	defer release()
	var ticket downloader.SharedTicket
	var end time.Time
	if e.cfg.Shared != nil {
		var slotAt time.Time
		if ticket, slotAt, stop, ok = e.admitShared(ctx, req, pol, now); !ok {
			release()
			return stop
		}
		tellWire(&adm, ticket)
		end = slotAt.Add(e.timeoutOf(req))
	}
	start := e.cfg.Clock.Now()
	out := e.run(ctx, req, u, &adm, end)
	took := e.cfg.Clock.Now().Sub(start)
	e.holdForOrigin(req, out)
	e.sharedDone(ctx, ticket, &adm, req.Domain)
	release()
	switch {
	case pol.isWaiting && (out.FailReason == downloader.FailLocalQueueFull || out.FailReason == downloader.FailShuttingDown):
		return pol.notSent(now, out) // nothing was fetched: our reasons
	case pol.isQueueFullRefused && out.FailReason == downloader.FailLocalQueueFull:
		return pol.overLimit(now, downloader.FailLocalQueueFull, queueFullRetryAfter)
	}
	return passage{out: out, at: now, start: start, took: took}
}

// admitDomain takes the local limiter's admission of req's domain, at the decision's
// time now. Entry A reserves the next slot and waits for it, unless it would pass the
// policy's deadline (then the task goes back at once, to come again when the slot is
// near), and reserves again if an origin's wait began meanwhile; B and C are admitted now or refused self_rate_limited with the wait. ok is false
// when the request stops here, with the passage to answer.
func (e *Engine) admitDomain(ctx context.Context, req downloader.Request, pol policy, now time.Time) (adm limiter.Admission, stop passage, ok bool) {
	if !pol.isWaiting {
		adm, wait := e.cfg.Limiter.Allow(now, req.Domain, req.MinInterval, req.IntervalSource, req.Entry)
		if wait > 0 {
			return adm, pol.overLimit(now, downloader.FailSelfRateLimited, wait), false
		}
		return adm, passage{}, true
	}
	reserve := e.cfg.Limiter.Reserve
	if pol.isPaced {
		reserve = e.cfg.Limiter.ReservePaced
	}
	for at := now; ; at = e.cfg.Clock.Now() {
		adm, delay, ok := reserve(at, req.Domain, req.MinInterval, req.IntervalSource, req.Entry, pol.deadline)
		if delay > 0 {
			e.observe(&downloader.Event{At: at, Entry: req.Entry, URL: req.URL, Domain: req.Domain, ShouldRender: req.ShouldRender,
				MinInterval: req.MinInterval, IntervalSource: req.IntervalSource, OverLimit: !pol.isPaced, Paced: pol.isPaced,
				Delay: delay, TaskID: pol.taskID()})
		}
		if !ok {
			return adm, pol.overLimit(now, downloader.FailSelfRateLimited, delay), false
		}
		if err := e.sleep(ctx, delay); err != nil {
			adm.Cancel()
			return adm, pol.notSent(now, nil), false
		}
		// The origin may have asked for a wait (hold.go) while the task waited for its
		// slot: give the slot back and reserve one after the wait, or hand the task back.
		if adm.HeldFor(e.cfg.Clock.Now()) == 0 {
			return adm, passage{}, true
		}
		adm.Cancel()
	}
}

// admitShared takes the cluster-wide admission (cluster mode), after the local one:
// entry A reserves and waits (admitTaskShared); B and C ask once, and are refused
// self_rate_limited while the domain is busy elsewhere, or told the shared state is
// unavailable (fail closed: nothing is sent). slotAt is no later than the slot the
// shared runtime gave; the request must be over by slotAt plus its timeout.
func (e *Engine) admitShared(ctx context.Context, req downloader.Request, pol policy, now time.Time) (ticket downloader.SharedTicket, slotAt time.Time, stop passage, ok bool) {
	if pol.isWaiting {
		tk, slotAt, retryAfter, ok := e.admitTaskShared(ctx, pol.task, req, pol.deadline)
		if !ok {
			return nil, time.Time{}, passage{isHandedBack: true, retryAfter: retryAfter, at: now, start: now}, false
		}
		return tk, slotAt, passage{}, true
	}
	admitAt := e.cfg.Clock.Now() // no later than the slot the shared runtime gives
	tk, wait, err := e.cfg.Shared.Admit(ctx, downloader.SharedAdmit{Domain: req.Domain, MinInterval: req.MinInterval,
		IntervalSource: req.IntervalSource, Entry: req.Entry, Now: admitAt, Timeout: e.timeoutOf(req)})
	switch {
	case err != nil:
		return nil, time.Time{}, passage{sharedErr: err, at: now, start: now}, false
	case wait > 0:
		return nil, time.Time{}, pol.overLimit(now, downloader.FailSelfRateLimited, wait), false
	}
	return tk, admitAt, passage{}, true
}

// renderSlot takes a render slot for req, waiting at most the request's timeout: a render
// that cannot start in that time would time out anyway.
func (e *Engine) renderSlot(ctx context.Context, req downloader.Request) (release func(), failed *downloader.Outcome) {
	ctx, cancel := context.WithTimeout(ctx, e.timeoutOf(req))
	defer cancel()
	stop := context.AfterFunc(e.stopping, cancel)
	defer stop()
	release, failed = e.cfg.Renderer.AcquireSlot(ctx)
	if failed != nil && e.isStopping() {
		failed = downloader.Failed(downloader.FailShuttingDown)
	}
	return release, failed
}

// run fetches or renders under adm, with the request's timeout and its own hop admitter
// (hopsFor), and decides the outcome's fail_reason (failReason).
//
// end, when not zero, is when the request must be over: in cluster mode the shared
// admission's slot plus the timeout, so that the request cannot go on the wire after its
// in-flight entry expires for the other instances (slot + timeout + slack), however long
// the admission's transaction or this goroutine took to get here.
func (e *Engine) run(ctx context.Context, req downloader.Request, u *url.URL, adm *limiter.Admission, end time.Time) *downloader.Outcome {
	timeout := e.timeoutOf(req)
	if !end.IsZero() {
		timeout = min(timeout, end.Sub(e.cfg.Clock.Now())) // a duration: the clock may be a fake one
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hops := e.hopsFor(req)
	defer e.endHops(ctx, hops.tickets)
	stop := context.AfterFunc(e.stopping, cancel)
	defer stop()

	headers := req.Headers.Merge(e.cfg.DefaultRequestHeaders)
	var out *downloader.Outcome
	switch {
	case req.ShouldRender && e.cfg.Renderer == nil:
		out = downloader.FailedBy(downloader.CauseRendererUnavailable)
	case req.ShouldRender:
		out = e.cfg.Renderer.RenderInSlot(ctx, u, adm, hops, downloader.RenderOptions{
			Timeout: timeout, SkipResourceTypes: req.SkipResourceTypes, Headers: headers})
	default:
		stored := e.storedPage(ctx, req)
		out = e.cfg.Fetcher.FetchWith(ctx, u, adm, hops, downloader.FetchOptions{
			Headers: headers, IsOnce: req.Entry == downloader.EntryProbe, Conditional: stored.Validators})
		if out.HealthSignal.IsNotModified {
			e.notModified(ctx, out, stored.PageKey)
		}
	}
	out.FailReason = e.failReason(req, out, hops.tickets)
	return out
}

// failReason is SPEC §4's fail_reason of out, decided once for every entry: the typed
// cause the fetcher or renderer gave, with what only the engine knows
// (downloader.DecideFailReason: a request cut short by our own stop did not fail on the
// origin's side; a hop refused because the shared state could not be reached was not our
// limit's refusal), then the egress verdict (egress_unavailable instead of a
// network-level failure while our own egress is down).
func (e *Engine) failReason(req downloader.Request, out *downloader.Outcome, hops *hopTickets) downloader.FailReason {
	reason := downloader.DecideFailReason(out, downloader.FailContext{
		IsStopping: e.isStopping(), IsHopSharedUnavailable: hops.wasUnavailable()})
	if e.cfg.Egress != nil {
		reason = e.cfg.Egress.Judge(e.cfg.Clock.Now(), req.Domain, req.Entry, reason, out.HTTPStatus != 0)
	}
	return reason
}

// storedPage is the page the page store holds for a plain fetch that will be stored, with
// the validators it was served with: the fetch sends them (a conditional request, SPEC
// §5), and a 304 answers with that page. Zero when there is none, or the request stores
// nothing (a probe's or an unstored B request's answer needs the body itself).
func (e *Engine) storedPage(ctx context.Context, req downloader.Request) downloader.PageRef {
	if !req.ShouldStore || req.ShouldRender || e.cfg.Pages == nil {
		return downloader.PageRef{}
	}
	ref, ok, err := e.cfg.Pages.LatestPage(ctx, req.URL)
	if err != nil {
		// The fetch is then unconditional: it costs bytes, never correctness.
		e.log.Warn("look up the stored page for a conditional request", "url", req.URL, "error", err)
		return downloader.PageRef{}
	}
	if !ok {
		return downloader.PageRef{}
	}
	return ref
}

// notModified completes a 304 to our conditional request with the stored page it
// confirmed (SPEC §4: a success, health_signal.is_not_modified): the page key the result
// and report carry, and the page's content and raw_text_length, as if it had been
// downloaded again. body_bytes stays what came over the wire: nothing.
func (e *Engine) notModified(ctx context.Context, out *downloader.Outcome, key string) {
	out.NotModifiedPageKey = key
	p, err := e.cfg.Pages.Page(ctx, key)
	if err != nil {
		e.log.Warn("read the stored page a 304 confirmed", "page_key", key, "error", err)
		return
	}
	out.Body = p.Body
	out.HealthSignal.ContentType = p.ContentType
	n := htmltext.TextLength(p.Body, p.ContentType)
	out.RawTextLength = &n
}

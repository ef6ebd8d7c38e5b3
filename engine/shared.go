package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
)

// tellWire makes adm tell ticket its wire moment (see SharedTicket.Wired).
func tellWire(adm *limiter.Admission, ticket downloader.SharedTicket) {
	if ticket != nil {
		adm.OnWire(ticket.Wired)
	}
}

// sharedRetryMin and sharedRetryMax bound the pause of entry A between attempts to reach an
// unavailable shared runtime.
const (
	sharedRetryMin = 100 * time.Millisecond
	sharedRetryMax = 2 * time.Second
)

// sharedDoneTimeout bounds the write-back of a finished request.
const sharedDoneTimeout = 5 * time.Second

// errSharedUnavailable is entry B's answer (HTTP 503) when the shared runtime cannot be
// reached; entry C answers runtime_store_unavailable.
var errSharedUnavailable = downloader.Errorf(downloader.EUNAVAILABLE,
	"the shared limiter state (downloader:domain_runtime in TiKV) is unavailable: the request was not sent")

// timeoutOf is the timeout a request runs with.
func (e *Engine) timeoutOf(req downloader.Request) time.Duration {
	if req.Timeout > 0 {
		return req.Timeout
	}
	return e.cfg.DefaultTimeout
}

// sharedUnavailable records that req was not sent because the shared runtime failed, and
// answers: entry C a summary with runtime_store_unavailable (not reached), entry B the
// EUNAVAILABLE error.
func (e *Engine) sharedUnavailable(req downloader.Request, now time.Time, err error) (*downloader.Answer, error) {
	e.log.Warn("shared limiter state unavailable: request not sent", "entry", string(req.Entry),
		"domain", req.Domain, "url", req.URL, "error", err)
	out := downloader.Failed(downloader.FailRuntimeStoreUnavailable)
	s := out.Summary(req.Domain)
	s.HealthSignal = nil // no request was made
	e.observe(&downloader.Event{At: now, Entry: req.Entry, URL: req.URL, Domain: req.Domain, ShouldRender: req.ShouldRender,
		MinInterval: req.MinInterval, IntervalSource: req.IntervalSource, Summary: s})
	if req.Entry == downloader.EntryRender {
		return nil, errSharedUnavailable
	}
	return &downloader.Answer{Outcome: out, Summary: s}, nil
}

// admitTaskShared takes entry A's shared admission: it reserves the next slot and waits
// for it; while the domain is busy elsewhere or the shared state cannot be reached it asks
// again, until the slot would pass deadline (the task is then handed back). ok is false
// when the task must be handed back, to come again after retryAfter. slotAt is no later
// than the slot the shared runtime gave.
func (e *Engine) admitTaskShared(ctx context.Context, t *downloader.Task, req downloader.Request, deadline time.Time) (ticket downloader.SharedTicket, slotAt time.Time, retryAfter time.Duration, ok bool) {
	pause := sharedRetryMin
	observed := false
	for {
		now := e.cfg.Clock.Now()
		tk, wait, err := e.cfg.Shared.Admit(ctx, downloader.SharedAdmit{Domain: req.Domain, MinInterval: req.MinInterval,
			IntervalSource: req.IntervalSource, Entry: req.Entry, Now: now, Reserve: true, Deadline: deadline,
			Timeout: e.timeoutOf(req)})
		if err != nil {
			// Fail closed: entry A waits for the shared state rather than sending unadmitted.
			e.log.Warn("shared limiter state unavailable: task waits", "task_id", t.TaskID, "domain", req.Domain, "error", err)
			wait, pause = pause, min(2*pause, sharedRetryMax)
		} else if wait > 0 && !observed {
			observed = true
			e.observe(&downloader.Event{At: now, Entry: req.Entry, URL: req.URL, Domain: req.Domain, ShouldRender: req.ShouldRender,
				MinInterval: req.MinInterval, IntervalSource: req.IntervalSource, OverLimit: true, Delay: wait, TaskID: t.TaskID})
		}
		if tk != nil {
			if err := e.sleep(ctx, wait); err != nil {
				tk.Done(context.WithoutCancel(ctx), e.cfg.Clock.Now())
				return nil, time.Time{}, handBackAfter, false
			}
			return tk, now.Add(wait), 0, true
		}
		if ctx.Err() != nil || e.isStopping() {
			return nil, time.Time{}, handBackAfter, false
		}
		if !deadline.IsZero() && now.Add(wait).After(deadline) {
			return nil, time.Time{}, wait, false
		}
		if err := e.sleep(ctx, wait); err != nil {
			return nil, time.Time{}, handBackAfter, false
		}
	}
}

// sharedDone ends ticket (when there is one) with the latest moment the local limiter
// knows a request of domain went on the wire, which is no earlier than this request's
// wire moment. adm must still be live (not yet Done or Cancelled), so that the domain's
// entry is still in the table.
func (e *Engine) sharedDone(ctx context.Context, ticket downloader.SharedTicket, adm *limiter.Admission, domain string) {
	if ticket == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedDoneTimeout)
	defer cancel()
	ticket.Done(ctx, e.wireBound(adm.Slot(), adm.Admitted(), domain))
}

// wireBound returns an instant no earlier than the wire moment of a request of domain
// admitted locally with slot (if it went out), and no later than now.
func (e *Engine) wireBound(slot time.Time, admitted bool, domain string) time.Time {
	now := e.cfg.Clock.Now()
	if !admitted {
		return now
	}
	from, ok := e.cfg.Limiter.CountsFrom(domain)
	if !ok {
		return now
	}
	// The limiter's instants share one base, so from - slot is exact; placing the slot on
	// now's scale (by monotonic difference) keeps a wall-clock step since the limiter
	// started out of the result.
	w := now.Add(-now.Sub(slot)).Add(from.Sub(slot.Round(0).UTC()))
	if w.After(now) {
		return now
	}
	return w
}

// hopTickets collects the shared tickets of a request's redirect hops, so that they end
// with the request (run ends them). A request's Hops holds it (hopsFor).
type hopTickets struct {
	mu    sync.Mutex
	items []hopTicket
	// unavailable: a hop was not sent because the shared state could not be reached.
	unavailable bool
}

// wasUnavailable reports whether a hop of h failed on the shared state (h may be nil).
func (h *hopTickets) wasUnavailable() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unavailable
}

type hopTicket struct {
	ticket downloader.SharedTicket
	slot   time.Time
	domain string
}

// endHops ends every hop ticket of h.
func (e *Engine) endHops(ctx context.Context, h *hopTickets) {
	if h == nil {
		return
	}
	h.mu.Lock()
	items := h.items
	h.items = nil
	h.mu.Unlock()
	if len(items) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedDoneTimeout)
	defer cancel()
	for _, it := range items {
		it.ticket.Done(ctx, e.wireBound(it.slot, true, it.domain))
	}
}

// admitHopShared takes a redirect hop's shared admission after its local one (a), waiting
// for a reserved slot within ctx's deadline. The ticket joins the request's hop tickets;
// without them (a hop outside run) it is left to expire, which is safe. When the deadline
// comes while the shared state cannot be reached, the error wraps errSharedUnavailable
// (EUNAVAILABLE: fetch's cause is the shared state unavailable) and the request's hop
// tickets remember it (failReason maps a render's refusal the same way).
func (h *Hops) admitHopShared(ctx context.Context, a *limiter.Admission, domain string, interval time.Duration, source downloader.IntervalSource) error {
	clk := h.e.cfg.Limiter.Clock()
	pause := sharedRetryMin
	var lastErr error // the latest attempt's failure to reach the shared state
	unavailable := func() error {
		if ts := h.tickets; ts != nil {
			ts.mu.Lock()
			ts.unavailable = true
			ts.mu.Unlock()
		}
		return fmt.Errorf("%w: %w", errSharedUnavailable, lastErr)
	}
	for {
		now := clk.Now()
		deadline, _ := ctx.Deadline()
		timeout := h.e.cfg.DefaultTimeout
		if !deadline.IsZero() {
			timeout = deadline.Sub(now)
		}
		tk, wait, err := h.e.cfg.Shared.Admit(ctx, downloader.SharedAdmit{Domain: domain, MinInterval: interval, IntervalSource: source,
			Entry: h.entry, Now: now, Reserve: true, Deadline: deadline, Timeout: timeout})
		lastErr = err
		if err != nil {
			wait, pause = pause, min(2*pause, sharedRetryMax)
		}
		if tk != nil {
			if ts := h.tickets; ts != nil {
				ts.mu.Lock()
				ts.items = append(ts.items, hopTicket{ticket: tk, slot: a.Slot(), domain: domain})
				ts.mu.Unlock()
			}
			tellWire(a, tk)
			return clock.Sleep(ctx, clk, wait)
		}
		if !deadline.IsZero() && now.Add(wait).After(deadline) {
			if err != nil {
				return unavailable()
			}
			return context.DeadlineExceeded
		}
		if err := clock.Sleep(ctx, clk, wait); err != nil {
			if lastErr != nil && !errors.Is(err, context.Canceled) {
				return unavailable()
			}
			return err
		}
	}
}

// EvenShare is the capacity-share policy of cluster mode (SPEC §2, the global cap across
// machines): the cluster-wide max_concurrent_count (capacity) split evenly over the live
// instances (their sorted ids), the remainder going one each to the first ids. It returns
// instance id's share; 0 when id is not live. store/tikv's Runtime asks it at every
// heartbeat (RuntimeConfig.Share, wired by cmd) and keeps the result within what the
// other instances' claims leave.
func EvenShare(capacity int, live []string, id string) int {
	i, found := slices.BinarySearch(live, id)
	if !found || len(live) == 0 {
		return 0
	}
	s := capacity / len(live)
	if i < capacity%len(live) {
		s++
	}
	return s
}

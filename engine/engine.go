// Package engine runs a request through the insurance limiter, the global cap and a
// fetcher or renderer, stores what should be stored, and tells observers. It implements
// the three entries' over-limit behaviours (SPEC §2):
//
//	entry   over the domain interval          global cap and local queue full
//	A       reserve the next slot, delay      wait for a slot
//	B       OverLimitError → HTTP 429         OverLimitError → HTTP 429
//	C       self_rate_limited, not reached    local_queue_full, not reached
//
// The HTTP layer (package server) and the lease loop (package lease) call it.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync/atomic"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/fetch"
	"downloader/htmltext"
	"downloader/limiter"
)

// Fetcher does one plain GET under an admission taken by the caller (package fetch),
// its redirect hops admitted by hops (nil: not followed), with the request's options
// (its headers; IsOnce for entry C, one GET of a domain among many).
type Fetcher interface {
	FetchWith(ctx context.Context, u *url.URL, adm *limiter.Admission, hops limiter.HopAdmitter, opts downloader.FetchOptions) *downloader.Outcome
}

// Renderer renders pages in a headless browser (package render), under an admission taken
// by the caller. The engine takes a render slot before a global slot, so that renders
// waiting for the browser hold none of max_concurrent_count's slots: a burst of renders
// then cannot starve plain requests of the global cap.
type Renderer interface {
	// AcquireSlot waits for one of the renderer's slots in its bounded queue, or fails at
	// once with local_queue_full when the queue is full (or with the reason it cannot wait:
	// shutting_down, render_timeout when ctx's deadline passed). The slot is held until
	// release is called.
	AcquireSlot(ctx context.Context) (release func(), failed *downloader.Outcome)
	// RenderInSlot renders one page under a slot taken with AcquireSlot, its later main
	// documents admitted by hops.
	RenderInSlot(ctx context.Context, u *url.URL, adm *limiter.Admission, hops limiter.HopAdmitter, opts downloader.RenderOptions) *downloader.Outcome
}

// EgressJudge tells our own network failing from the origins failing (package egress): it
// sees every outcome and returns the reason to report, egress_unavailable instead of a
// network-level failure while our egress is down. Implementations are safe for
// concurrent use.
type EgressJudge interface {
	Judge(now time.Time, domain string, entry downloader.Entry, reason downloader.FailReason, hasResponse bool) downloader.FailReason
}

// Config wires an Engine. Limiter, Gate and Fetcher are required.
type Config struct {
	Clock    clock.Clock
	Logger   *slog.Logger
	Limiter  *limiter.Limiter
	Gate     *limiter.Gate
	Fetcher  Fetcher
	Renderer Renderer // nil: every render answers renderer_unavailable
	Results  downloader.ResultStore
	Pages    downloader.PageStore
	Settings downloader.SettingsStore
	Observer downloader.Observer // nil: none
	Egress   EgressJudge         // nil: failures keep the reason the fetcher or renderer gave
	// Shared is the limiter state shared with other instances (cluster mode, shared.go).
	// nil: one machine, the local limiter alone decides.
	Shared downloader.SharedRuntime

	DefaultMinInterval time.Duration // applies when B or C gives no min_interval_ms
	DefaultTimeout     time.Duration // per request, when the caller gives none

	// HeaderPolicy decides which request_headers a leased task may carry (the same policy
	// entries B and C and the local queue apply).
	HeaderPolicy downloader.HeaderPolicy
	// DefaultRequestHeaders are sent with every request of entries A, B and C unless the
	// request gives the same header (--default-request-header).
	DefaultRequestHeaders downloader.RequestHeaders
}

// Engine is safe for concurrent use. Create it with New.
type Engine struct {
	cfg Config
	log *slog.Logger

	// stopping is done when the service starts to stop: new requests answer
	// shutting_down and requests in flight are cancelled with that reason. A context
	// rather than a bare channel: context.AfterFunc on a cancelCtx registers a request's
	// cancel in place, where on any other done channel it starts a goroutine per request.
	// isStopped says the same without the context's lock, for the checks on every request.
	stopping  context.Context
	stop      context.CancelFunc
	isStopped atomic.Bool
}

// New returns an engine. It does not start anything.
func New(cfg Config) *Engine {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = 30 * time.Second
	}
	stopping, stop := context.WithCancel(context.Background())
	return &Engine{cfg: cfg, log: cfg.Logger, stopping: stopping, stop: stop}
}

// DefaultMinInterval returns the interval used when a caller gives none.
func (e *Engine) DefaultMinInterval() time.Duration { return e.cfg.DefaultMinInterval }

// Stop makes every new request answer shutting_down and cancels requests in flight with
// that reason. Safe to call more than once.
func (e *Engine) Stop() {
	e.isStopped.Store(true)
	e.stop()
}

func (e *Engine) isStopping() bool { return e.isStopped.Load() }

// queueFullRetryAfter is the wait announced when the global cap and local queue are full:
// the real wait is unknown, and a second is about one mean service time.
const queueFullRetryAfter = time.Second

// renderedContentType is the Content-Type of a rendered document: the browser's DOM,
// serialized by us as UTF-8, whatever charset the page was served in.
const renderedContentType = "text/html; charset=utf-8"

// Probe runs entry C: never refused with an error, never stored (SPEC §5).
func (e *Engine) Probe(ctx context.Context, req downloader.Request, u *url.URL) downloader.Summary {
	req.Entry = downloader.EntryProbe
	req.ShouldStore = false
	res, err := e.do(ctx, req, u)
	if ol := (*downloader.OverLimitError)(nil); errors.As(err, &ol) {
		s := downloader.Failed(ol.Reason).Summary(req.Domain)
		s.HealthSignal = refusalHealthSignal(ol)
		return s
	}
	return res.Summary
}

// Render runs entry B. Over the domain interval, or with the global cap and local queue
// full, it returns an *downloader.OverLimitError (HTTP 429).
func (e *Engine) Render(ctx context.Context, req downloader.Request, u *url.URL) (*downloader.Answer, error) {
	req.Entry = downloader.EntryRender
	return e.do(ctx, req, u)
}

// do admits and runs a B or C request (pipeline.go) and answers where it ended.
func (e *Engine) do(ctx context.Context, req downloader.Request, u *url.URL) (*downloader.Answer, error) {
	p := e.pipeline(ctx, req, u, policyOf(req, nil, time.Time{}))
	switch {
	case p.refused != nil:
		return nil, e.overLimit(req, p.at, p.refused.Reason, p.refused.RetryAfter)
	case p.sharedErr != nil:
		return e.sharedUnavailable(req, p.at, p.sharedErr)
	}
	return e.finish(ctx, req, u, p.out, p.took, p.start), nil
}

// overLimit records and builds a refusal.
func (e *Engine) overLimit(req downloader.Request, now time.Time, reason downloader.FailReason, wait time.Duration) *downloader.OverLimitError {
	s := downloader.Failed(reason).Summary(req.Domain)
	s.HealthSignal = nil
	e.observe(&downloader.Event{At: now, Entry: req.Entry, URL: req.URL, Domain: req.Domain, ShouldRender: req.ShouldRender,
		MinInterval: req.MinInterval, IntervalSource: req.IntervalSource, OverLimit: true, Delay: wait, Summary: s})
	return &downloader.OverLimitError{Reason: reason, RetryAfter: wait}
}

// finish stores what should be stored and tells observers.
func (e *Engine) finish(ctx context.Context, req downloader.Request, u *url.URL, out *downloader.Outcome, took time.Duration, at time.Time) *downloader.Answer {
	res := &downloader.Answer{Outcome: out, Summary: out.Summary(req.Domain)}
	if req.Entry == downloader.EntryRender && len(out.Body) > 0 {
		// Entry B answers the page's content: the renderer gives the DOM and its text, both
		// UTF-8 already; a plain fetch gives the bytes as served, decoded here once by the
		// rule every output shares (SPEC §3).
		switch ct := out.HealthSignal.ContentType; {
		case req.ShouldRender:
			res.HTML = string(out.Body)
		default:
			// The text first: its walk's buffers are garbage before the html's copy is made.
			// At most the body cap of it, as a render's text (SPEC §3: the cap bounds what
			// one request costs).
			out.Text, _ = htmltext.TextUpTo(out.Body, ct, fetch.DefaultMaxBodyBytes)
			html, _ := htmltext.AsUTF8(out.Body, ct) // not text (an image): as it is
			res.HTML = string(html)
		}
	}
	if req.Entry == downloader.EntryRender && req.ShouldStore {
		key, err := e.store(ctx, req, "", out, at)
		if err != nil {
			e.log.Error("store render result", "domain", req.Domain, "url", req.URL, "error", err)
		}
		res.PageKey = key
	}
	e.observe(&downloader.Event{At: at, Entry: req.Entry, URL: req.URL, Domain: req.Domain, ShouldRender: req.ShouldRender,
		MinInterval: req.MinInterval, IntervalSource: req.IntervalSource, Summary: res.Summary, Duration: took})
	return res
}

// store writes the page (when there is one) and the fetch_result record (entry B: each
// durable when its call returns; entry A returns them instead, taskEnd).
func (e *Engine) store(ctx context.Context, req downloader.Request, taskID string, out *downloader.Outcome, at time.Time) (string, error) {
	end := e.taskEnd(req, taskID, out, at)
	key := end.Report.PageKey
	if end.Page != nil {
		k, err := e.cfg.Pages.PutPage(ctx, end.Page)
		if err != nil {
			return "", fmt.Errorf("put page of %s: %w", req.URL, err)
		}
		key = k
		end.SetPageKey(k)
	}
	if end.Result == nil {
		return key, nil
	}
	if err := e.cfg.Results.PutFetchResult(ctx, end.Result); err != nil {
		return key, fmt.Errorf("put fetch_result of %s: %w", req.URL, err)
	}
	return key, nil
}

// taskEnd returns what out leaves to store, unwritten: the page (when there is one to
// store), the fetch_result record (when results are kept) and the report; the page's key
// is filled in when the page is stored (TaskEnd.SetPageKey), or is the stored page's
// already when a 304 confirmed it.
func (e *Engine) taskEnd(req downloader.Request, taskID string, out *downloader.Outcome, at time.Time) *downloader.TaskEnd {
	s := out.Summary(req.Domain)
	end := &downloader.TaskEnd{Report: &downloader.Report{TaskID: taskID, Summary: s, FetchedAt: at.UTC()}}
	switch {
	case out.NotModifiedPageKey != "":
		end.Report.PageKey = out.NotModifiedPageKey // the stored page is the page (a 304 to our conditional request)
	case req.ShouldStore && e.cfg.Pages != nil && out.Body != nil && out.HTTPStatus != 0:
		// A plain fetch's page is kept as served, with the Content-Type that tells its
		// charset (readers decode it, htmltext.UTF8); a render's is the DOM, in UTF-8 (a
		// GBK page's header would mislabel it).
		ct := out.HealthSignal.ContentType
		headers := out.ResponseHeaders
		if req.ShouldRender {
			ct, headers = renderedContentType, nil
		}
		end.Page = &downloader.Page{URL: req.URL, FinalURL: out.FinalURL,
			ContentType: ct, FetchedAt: at.UTC(), ResponseHeaders: headers, Body: out.Body, Validators: out.Validators}
	}
	if e.cfg.Results != nil {
		end.Result = &downloader.FetchResult{Summary: s, TaskID: taskID, URL: req.URL,
			FinalURL: out.FinalURL, Entry: req.Entry, FetchedAt: at.UTC(), PageKey: end.Report.PageKey}
	}
	return end
}

func (e *Engine) observe(ev *downloader.Event) {
	if e.cfg.Observer != nil {
		e.cfg.Observer.Observe(ev)
	}
}

// Hops admits the redirect hops of one request (limiter.HopAdmitter, which fetch and
// render take with each call, the only way a hop admitter reaches them). Only the engine
// builds one, per request (hopsFor), so that what a hop's admission needs of its request
// travels with the call: the entry, and in cluster mode the shared tickets, which end
// with the request.
type Hops struct {
	e *Engine
	// entry is the entry of the request the hops belong to: the over-limit event and
	// the shared admission count for it.
	entry downloader.Entry
	// tickets collects the shared tickets of the request's hops (in cluster mode); nil:
	// one machine.
	tickets *hopTickets
}

// hopsFor returns the hop admitter of one request of e.
func (e *Engine) hopsFor(req downloader.Request) *Hops {
	h := &Hops{e: e, entry: req.Entry}
	if e.cfg.Shared != nil {
		h.tickets = &hopTickets{}
	}
	return h
}

// AdmitHop admits a redirect hop to domain: it waits its turn with the interval last used
// for that domain, or the default interval when the domain is new. The over-limit event,
// if any, counts for the entry of the request the hop belongs to.
func (h *Hops) AdmitHop(ctx context.Context, domain string) (limiter.Admission, error) {
	lim := h.e.cfg.Limiter
	interval, source, ok := lim.IntervalOf(domain)
	if !ok {
		interval, source = h.e.cfg.DefaultMinInterval, downloader.IntervalSourceDefault
	}
	a, err := lim.Wait(ctx, domain, interval, source, h.entry)
	if err != nil || h.e.cfg.Shared == nil {
		return a, err
	}
	if err := h.admitHopShared(ctx, &a, domain, interval, source); err != nil {
		a.Cancel()
		return limiter.Admission{}, fmt.Errorf("shared admission of %s: %w", domain, err)
	}
	return a, nil
}

package render

import (
	"context"
	"errors"
	"log/slog"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"downloader"
	"downloader/limiter"
)

// HopAdmitter admits the main document's later requests into the limiter: redirect hops,
// and navigations the page makes by itself (meta refresh, location=). The caller passes
// one per render (RenderInSlot; engine.Hops), the one way an admitter reaches a render.
type HopAdmitter = limiter.HopAdmitter

// errHopRefused ends a render whose main document could not be admitted in time.
var errHopRefused = errors.New("render: a main document hop was not admitted before the deadline")

// pausePatterns are the patterns of a tab with a pauser: the browser pauses, before they
// are sent, the requests the pauser must decide on, and no other (each paused request
// costs a CDP round trip on its way out, measured in docs/benchmarks-render.md): every
// document (the hops and frames), every request of a skipped type, and every https://
// request, whose sub-requests the proxy cannot count inside a CONNECT tunnel. A plain
// http:// sub-request is not paused: the proxy sees it as a request of its own and counts
// it under the render's caps (renderState.proxyCounts), so the caps stay exact without a
// round trip. (A plain-http prefetch, which the filter cannot name, the filter taking no
// Prefetch type, is refused by the proxy from its Sec-Purpose header.)
func pausePatterns(skip skipSet) []*fetch.RequestPattern {
	out := []*fetch.RequestPattern{
		{URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest},
		{URLPattern: "https://*", RequestStage: fetch.RequestStageRequest},
	}
	for _, t := range skip {
		if t != network.ResourceTypeDocument {
			out = append(out, typePattern(t)...)
		}
	}
	return out
}

// frameGrace is how far ahead a host's turn may be for an iframe's document on another
// host to take it: the iframe is admitted if its host's turn is now, else skipped
// (docs/benchmarks-render.md has the measurement against sending it unadmitted and
// against waiting for the turn).
const frameGrace = 20 * time.Millisecond

// pauser decides on a tab's paused requests (SPEC §3: a render never loads another site
// behind that site's limiter). The render's first main document goes on at once: the
// caller's admission covers it. Every later main-frame document (a redirect hop, a
// navigation the page makes by itself) waits for an admission of its own from the
// HopAdmitter, bounded by the render's deadline; one that cannot be admitted in time is
// failed, and the render ends with self_rate_limited. An iframe document on another host
// is admitted if that host's turn is now, else skipped (docs/benchmarks-render.md).
// A request of a resource type the render skips (skip_resource_types) is failed as
// blocked by the client and counted skipped (intercept.go). Speculative loads (prefetch)
// are failed. Every other request is a sub-request, under the caller's admission and
// bounded by the render's caps. The page's attempts to open
// windows are counted here (the local browser refuses them: --block-new-web-contents).
//
// onEvent runs on the tab's event loop and only queues; run handles the queue on its own
// goroutine, and each admission wait on another. Safe for concurrent use.
type pauser struct {
	log *slog.Logger
	wg  *sync.WaitGroup // the tab's: close waits for run and the admission waits

	mu         sync.Mutex
	mainFrame  cdp.FrameID
	queue      []*fetch.EventRequestPaused
	r          *hopRender // the render served; nil before it is armed
	firstSeen  bool       // the render's first main document was let through
	mainDomain string     // the domain of the main frame's latest document request
	wake       chan struct{}
}

// hopRender is what the pauser needs of the render it serves.
type hopRender struct {
	ctx    context.Context // the render's: ends with the render
	hops   HopAdmitter     // the render's hop admitter (RenderInSlot's)
	soft   time.Time       // a hop must be admitted before it (the page is read from then)
	st     *renderState
	skip   skipSet  // the resource types the render does not load
	tr     *tracker // told which requests were skipped; nil: none is told
	refuse func()   // ends the render at once (with errHopRefused)
	// headers are the request's allow-listed headers, sent with its main-frame documents
	// (on another host than the first, without Cookie: RequestHeaders.ForHop).
	headers downloader.RequestHeaders
}

func newPauser(log *slog.Logger, wg *sync.WaitGroup) *pauser {
	return &pauser{log: log, wg: wg, wake: make(chan struct{}, 1)}
}

func (p *pauser) setMainFrame(id cdp.FrameID) {
	p.mu.Lock()
	p.mainFrame = id
	p.mu.Unlock()
}

// arm makes the pauser serve the render r.
func (p *pauser) arm(r *hopRender) {
	r.st.countsAtPauser()
	p.mu.Lock()
	p.r = r
	p.mu.Unlock()
}

// onEvent is the tab's listener: it queues paused requests, counts popups, and never
// blocks.
func (p *pauser) onEvent(ev any) {
	if _, ok := ev.(*page.EventWindowOpen); ok {
		p.mu.Lock()
		r := p.r
		p.mu.Unlock()
		if r != nil {
			r.st.countPopup()
		}
		return
	}
	e, ok := ev.(*fetch.EventRequestPaused)
	if !ok {
		return
	}
	p.mu.Lock()
	p.queue = append(p.queue, e)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run handles paused requests until the tab's context ends.
func (p *pauser) run(tctx context.Context) {
	for {
		p.mu.Lock()
		q := p.queue
		p.queue = nil
		p.mu.Unlock()
		for _, e := range q {
			p.handle(tctx, e)
		}
		select {
		case <-p.wake:
		case <-tctx.Done():
			return
		}
	}
}

// decision is what the pauser does with one paused request.
type decision int

const (
	decideContinue   decision = iota // let it go on
	decideFail                       // fail it: no render, or not a request we send
	decideAdmit                      // a later main-frame document: admit it first
	decideAdmitFrame                 // an iframe's document on another host (frameMode)
	decideSubrequest                 // the page's own request: under the render's caps
	decideSkip                       // a resource type the render skips: fail it, count it
)

// decide classifies a paused request. It marks the render's first main document seen and
// follows the main frame's domain.
func (p *pauser) decide(e *fetch.EventRequestPaused) (*hopRender, string, decision) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.r
	if r == nil || r.st.isReleased() {
		return r, "", decideFail // no render in progress: nothing may go out
	}
	domain, err := requestDomain(e.Request)
	if e.ResourceType != network.ResourceTypeDocument && r.skip.has(e.ResourceType) {
		return r, domain, decideSkip // never sent: not a sub-request, not capped
	}
	if isSpeculative(e) {
		return r, domain, decideFail // a load of a page nobody asked for
	}
	if e.ResourceType != network.ResourceTypeDocument {
		return r, domain, decideSubrequest
	}
	if e.FrameID != p.mainFrame {
		if err != nil || domain == p.mainDomain {
			return r, domain, decideSubrequest // part of the page, like its scripts
		}
		return r, domain, decideAdmitFrame
	}
	if err != nil {
		p.log.Info("render: main document request to an unusable URL refused", "error", err)
		return r, "", decideFail
	}
	p.mainDomain = domain
	if !p.firstSeen {
		p.firstSeen = true
		return r, domain, decideContinue
	}
	return r, domain, decideAdmit
}

func (p *pauser) handle(tctx context.Context, e *fetch.EventRequestPaused) {
	r, domain, d := p.decide(e)
	switch d {
	case decideContinue:
		p.passDocument(tctx, r, e, domain)
		return
	case decideFail:
		p.fail(tctx, e.RequestID)
		return
	case decideSkip:
		if r.tr != nil && e.NetworkID != "" {
			r.tr.markSkipped(e.NetworkID) // before it fails: counted apart from sub-requests
		}
		// Not on the queue's goroutine, as a sub-request (a page's images come in bursts).
		p.wg.Go(func() { p.fail(tctx, e.RequestID) })
		return
	case decideAdmitFrame:
		p.wg.Go(func() { p.admitFrame(tctx, r, e, domain) })
		return
	case decideSubrequest:
		// Not on the queue's goroutine: a page's burst of sub-requests would wait for one
		// CDP round trip after another.
		if r.st.admitSubrequest(domain) {
			p.wg.Go(func() { p.pass(tctx, r, e) })
		} else {
			p.wg.Go(func() { p.fail(tctx, e.RequestID) })
		}
		return
	}
	if r.st.coveredByFirst(domain) {
		// Nothing of the page's own request went on the wire yet (the browser upgraded
		// it to HTTPS by itself, say): the caller's admission covers this one.
		p.passDocument(tctx, r, e, domain)
		return
	}
	// Waiting here would hold up the queue: an iframe's request paused meanwhile would
	// wait for the main frame's turn.
	p.wg.Go(func() { p.admit(tctx, r, e, domain) })
}

// admitFrame admits an iframe's document request if its host's turn is now (frameGrace),
// or fails it and counts it skipped; the render goes on either way.
func (p *pauser) admitFrame(tctx context.Context, r *hopRender, e *fetch.EventRequestPaused, domain string) {
	id := e.RequestID
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	stop := context.AfterFunc(tctx, cancel)
	defer stop()
	adm, err := r.hops.AdmitHop(withDeadline(ctx, r.st.clk.Now().Add(frameGrace)), domain)
	if err != nil || !r.st.addHop(domain, adm) {
		if err != nil && ctx.Err() == nil {
			r.st.countSkippedFrame()
		}
		p.fail(tctx, id)
		return
	}
	p.pass(tctx, r, e)
}

// admit waits for the hop's admission and lets the request go on, or fails it and ends
// the render.
func (p *pauser) admit(tctx context.Context, r *hopRender, e *fetch.EventRequestPaused, domain string) {
	id := e.RequestID
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	stop := context.AfterFunc(tctx, cancel)
	defer stop()
	adm, err := r.hops.AdmitHop(withDeadline(ctx, r.soft), domain)
	if err != nil {
		if ctx.Err() == nil {
			// Not admitted before the deadline: nothing goes to domain, and the render
			// is our own limiter's refusal (SPEC §2 and §4: self_rate_limited).
			p.log.Info("render: main document hop not admitted in time", "domain", domain, "error", err)
			r.st.refuseHop()
			p.fail(tctx, id)
			r.refuse()
			return
		}
		p.fail(tctx, id)
		return
	}
	if !r.st.addHop(domain, adm) {
		p.fail(tctx, id) // the render ended meanwhile; addHop gave the admission back
		return
	}
	p.passDocument(tctx, r, e, domain)
}

// pass lets a paused request go on. A plain http:// one (a document: only those and the
// skipped types are paused over http) is marked decided first, so that the proxy, which
// counts the plain-http requests it was not told of as sub-requests, does not count it.
//
// An https:// one leaves a tunnel credit for its host: the CONNECT it may open is
// counted already (tunnelcaps.go).
func (p *pauser) pass(tctx context.Context, r *hopRender, e *fetch.EventRequestPaused) {
	p.markPassed(r, e)
	p.resume(tctx, e.RequestID)
}

// markPassed tells the proxy of a request the pauser lets go on (pass).
func (p *pauser) markPassed(r *hopRender, e *fetch.EventRequestPaused) {
	if e.Request != nil {
		switch {
		case strings.HasPrefix(e.Request.URL, "http://"):
			r.st.markDecided(e.Request.URL)
		case strings.HasPrefix(e.Request.URL, "https://"):
			if d, err := requestDomain(e.Request); err == nil {
				r.st.creditTunnel(d)
			}
		}
	}
}

// passDocument is pass for a main-frame document: it goes on with the request's headers
// (SPEC §5, request_headers), Cookie only to the render's own host.
func (p *pauser) passDocument(tctx context.Context, r *hopRender, e *fetch.EventRequestPaused, domain string) {
	h := r.headers.ForHop(domain == r.st.domain)
	if len(h) == 0 || e.Request == nil {
		p.pass(tctx, r, e)
		return
	}
	p.markPassed(r, e)
	// continueRequest's headers replace the request's: the browser's own, then ours.
	entries := make([]*fetch.HeaderEntry, 0, len(e.Request.Headers)+len(h))
	for name, v := range e.Request.Headers {
		if _, ours := h[textproto.CanonicalMIMEHeaderKey(name)]; ours {
			continue
		}
		if s, ok := v.(string); ok {
			entries = append(entries, &fetch.HeaderEntry{Name: name, Value: s})
		}
	}
	for name, v := range h {
		entries = append(entries, &fetch.HeaderEntry{Name: name, Value: v})
	}
	if _, err := chromedp.Call(tctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID, Headers: entries}); err != nil && tctx.Err() == nil {
		p.log.Debug("render: continue paused document with headers", "error", err)
	}
}

func (p *pauser) resume(tctx context.Context, id fetch.RequestID) {
	if _, err := chromedp.Call(tctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id}); err != nil && tctx.Err() == nil {
		p.log.Debug("render: continue paused request", "error", err)
	}
}

func (p *pauser) fail(tctx context.Context, id fetch.RequestID) {
	if _, err := chromedp.Call(tctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: id, ErrorReason: network.ErrorReasonBlockedByClient}); err != nil && tctx.Err() == nil {
		p.log.Debug("render: fail paused request", "error", err)
	}
}

// isSpeculative reports whether a paused request is a speculative load: a prefetch of a
// link (rel=prefetch, speculation rules), which loads a page or resource the page might
// want later. The local browser's flags turn prerender, no-state prefetch and DNS
// prefetch off; this check holds on a remote endpoint too.
func isSpeculative(e *fetch.EventRequestPaused) bool {
	if e.ResourceType == network.ResourceTypePrefetch {
		return true
	}
	if e.Request == nil {
		return false
	}
	for k, v := range e.Request.Headers {
		if s, ok := v.(string); ok && (strings.EqualFold(k, "Sec-Purpose") || strings.EqualFold(k, "Purpose")) && strings.Contains(strings.ToLower(s), "prefetch") {
			return true
		}
	}
	return false
}

// requestDomain is the limiter's key for a paused request.
func requestDomain(req *network.Request) (string, error) {
	if req == nil {
		return "", errors.New("no request")
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return "", errors.New("not an http(s) URL with a host")
	}
	return downloader.CanonicalHost(u.Host)
}

// withDeadline returns ctx with a Deadline of at (or ctx's own, if earlier) for the
// limiter to refuse a slot past it at once, without a timer: ctx already ends with the
// render, on the pool's clock.
func withDeadline(ctx context.Context, at time.Time) context.Context {
	if d, ok := ctx.Deadline(); ok && d.Before(at) {
		return ctx
	}
	return deadlineCtx{ctx, at}
}

type deadlineCtx struct {
	context.Context
	at time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.at, true }

// hopAdmission is one admitted hop of a render.
type hopAdmission struct {
	domain string
	adm    limiter.Admission // guarded by renderState.mu (an Admission is not safe for concurrent use)
	gate   *limiter.WireGate // adm's passage to the wire (wire.go)
}

// addHop records a hop's admission, to be wired by the next write to its domain and given
// back when the render ends. It returns false, having given adm back, if the render is over.
func (st *renderState) addHop(domain string, adm limiter.Admission) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.released {
		adm.Cancel()
		return false
	}
	h := &hopAdmission{domain: domain, adm: adm}
	h.gate = limiter.NewWireGate(context.Background(), &h.adm)
	st.hops = append(st.hops, h)
	st.unwiredHops.Add(1)
	return true
}

// coveredByFirst reports whether a hop to domain can go under the caller's admission:
// the page's own domain, while no connection to it was made yet.
func (st *renderState) coveredByFirst(domain string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return domain == st.domain && st.first.AwaitsAttempt() && !st.released
}

func (st *renderState) refuseHop() {
	st.mu.Lock()
	st.refused = true
	st.mu.Unlock()
}

func (st *renderState) hopRefused() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.refused
}

func (st *renderState) isReleased() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.released
}

// releaseHops gives back every hop admission: Cancel, which is Done for one that went on
// the wire. Requires st.mu held.
func (st *renderState) releaseHops() {
	for _, h := range st.hops {
		h.adm.Cancel()
	}
	st.hops = nil
	st.unwiredHops.Store(0)
}

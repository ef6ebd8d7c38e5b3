package render

import (
	"context"
	"downloader/render/renderproxy"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/css"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// closeTimeout bounds the disposal of a browser context that chromedp could not dispose
// of itself, and a long-lived tab's wipe between two renders.
const closeTimeout = 5 * time.Second

// tab is a tab with a proxy of ours. With IsolationContext it is a fresh tab in its own
// new browser context: it serves one render at most and is then closed with its context.
// With IsolationWipe it is a long-lived tab in a long-lived context of its own (sc): after
// each render it is wiped (reuse) and serves the next, until it has served
// MaxContextRenders or its renderer dies; then it is closed and its context disposed of.
//
// Each render has a use of its own: a new proxy, tracker and pauser. The tab's listeners
// send events to the current use (cur); the render's goroutine reads proxy, tr and pause,
// which change only between renders, while no render has the tab.
type tab struct {
	p  *Pool
	b  *browser
	sc *siteContext // IsolationWipe: the tab's long-lived context; nil: its own
	// conn is the tab's own connection to the server (profile.connectionPerRender: one
	// websocket per render, so that one render's navigation never holds back another's
	// commands); nil: the tab is on b's. b stays the pool's browser either way.
	conn       *browser
	ctx        context.Context // chromedp context of the tab
	cancel     context.CancelFunc
	detached   <-chan struct{} // closed when the browser detaches the tab
	mainFrame  cdp.FrameID
	skip       *skipper // fails the requests of skipped types when there is no pauser
	skipping   skipSet  // the types skipped now (without a pauser: the browser's patterns)
	wg         sync.WaitGroup
	closeOne   sync.Once
	isLive     bool // counted in the pool's live (p.mu)
	isCacheOff bool // the tab's HTTP cache is off for this render

	// The current use; proxy, tr and pause are its parts.
	use   *tabUse
	cur   atomic.Pointer[tabUse] // for the listeners
	proxy *renderproxy.Proxy
	tr    *tracker
	pause *pauser // nil when the pool admits no hops
}

// tabUse is what one render of a tab has of its own.
type tabUse struct {
	proxy  *renderproxy.Proxy
	tr     *tracker
	pause  *pauser
	ctx    context.Context // ends with the use: the pauser's loop
	cancel context.CancelFunc
	// detach takes the proxy off the pool's guard proxy (a server-wide proxy: Obscura).
	detach func()
	wg     sync.WaitGroup // the pauser and its admission waits
	endOne sync.Once
}

// newUse makes a use with a new proxy, for a tab whose main frame is not known yet. On a
// server that cannot pause requests as asked (interceptProxy) there is no pauser: the
// proxy sees and counts every request. The proxy listens on an address of its own only
// when the tab's browser context is pointed at it (listen: a context per render); a
// long-lived context's relay, or the server-wide guard proxy, hands it its connections.
func (p *Pool) newUse(parent context.Context, prof profile, listen bool) (*tabUse, error) {
	px, err := p.newProxy(listen)
	if err != nil {
		return nil, err
	}
	u := &tabUse{proxy: px, tr: newTracker()}
	if p.cfg.ShouldAdmitHops && prof.interception == interceptFetch {
		u.pause = newPauser(p.log, &u.wg)
	}
	u.ctx, u.cancel = context.WithCancel(parent)
	return u, nil
}

// start makes u the tab's current use.
func (t *tab) start(u *tabUse) {
	u.tr.setMainFrame(t.mainFrame)
	if u.pause != nil {
		u.pause.setMainFrame(t.mainFrame)
		u.wg.Go(func() { u.pause.run(u.ctx) })
	}
	if t.sc != nil {
		t.sc.relay.attach(u.proxy)
	}
	if t.b.prof.proxy == proxyServerWide && t.p.guard != nil {
		u.detach = t.p.guard.Attach(u.proxy)
	}
	t.use, t.proxy, t.tr, t.pause = u, u.proxy, u.tr, u.pause
	t.cur.Store(u)
}

// end ends u: every connection of the render is cut and its proxy closed. Idempotent.
func (t *tab) end(u *tabUse) {
	u.endOne.Do(func() {
		if t.sc != nil {
			t.sc.relay.detach() // before the proxy goes: nothing of this render's stays open
		}
		if u.detach != nil {
			u.detach()
		}
		u.cancel()
		u.wg.Wait()
		u.proxy.Close()
	})
}

// onEvent is the tab's listener: the current use's tracker.
func (t *tab) onEvent(ev any) {
	if u := t.cur.Load(); u != nil {
		u.tr.onEvent(ev)
	}
}

// newTab makes a tab with a new proxy of ours, and sets our user agent in it: in a new
// browser context whose proxy is that proxy (IsolationContext), or in a new long-lived
// context whose relay leads to it (IsolationWipe). It gives up when ctx ends.
func (p *Pool) newTab(ctx context.Context, b *browser) (*tab, error) {
	t := &tab{p: p, b: b, skipping: p.skipDefault}
	on := b // the connection the tab is made on
	if b.prof.connectionPerRender {
		c, err := p.launch(b.gen)
		if err != nil {
			return nil, fmt.Errorf("new tab: own connection: %w", err)
		}
		c.prof = b.prof
		t.conn, on = c, c
	}
	// The render's proxy listens when the tab's context is pointed at it (a context per
	// render), and on a server-wide proxy too: there our own redirect-chain requests go
	// through it (obscura_chain.go) while the guard proxy hands it the server's.
	listen := !p.isWipe(b) && b.prof.proxy == proxyPerContext || b.prof.proxy == proxyServerWide
	u, err := p.newUse(on.ctx, b.prof, listen)
	if err != nil {
		if t.conn != nil {
			t.conn.close()
		}
		return nil, err
	}
	t.use = u
	opts := []chromedp.ContextOption{chromedp.WithListener(t.onEvent), chromedp.WithListener(t.pausedRouter)}
	if p.isWipe(b) {
		if t.sc, err = p.newSiteContext(ctx, b); err != nil {
			t.end(u)
			return nil, err
		}
		t.sc.relay.attach(u.proxy)
		opts = append(opts, chromedp.WithExistingBrowserContext(t.sc.id))
	} else {
		opts = append(opts, chromedp.WithNewBrowserContext(func(params *target.CreateBrowserContextParams) {
			if b.prof.proxy == proxyServerWide {
				return // ignored there: the server's own proxy is our guard proxy (canary.go)
			}
			params.ProxyServer = "http://" + u.proxy.Addr()
			// Chrome sends loopback destinations around a proxy unless told not to; ours
			// must see them (the guard refuses them unless --connect-to maps them).
			params.ProxyBypassList = "<-loopback>"
		}))
	}
	t.skip = newSkipper(t)
	t.cur.Store(u)
	t.proxy, t.tr, t.pause = u.proxy, u.tr, u.pause
	patterns := fetchPatterns(t.skipping, u.pause != nil)
	if b.prof.interception == interceptProxy {
		// Obscura turns Fetch patterns into a block list of scripts and styles and never
		// pauses a document: no Fetch.enable at all (docs/renderers.md).
		patterns = nil
	}
	tctx, cancel := chromedp.NewContext(on.ctx, opts...)
	t.ctx, t.cancel = tctx, cancel

	// The first Run attaches the tab and binds its event loop to tctx, which therefore has
	// no deadline of its own; ctx bounds the wait.
	done := make(chan error, 1)
	go func() {
		done <- chromedp.Do(tctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			if err := p.setUserAgent(ctx, tg, b.prof); err != nil {
				return err
			}
			if err := p.quietAgents(ctx, tg, b.prof); err != nil {
				return err
			}
			if len(patterns) == 0 {
				return nil
			}
			// Every request waits for the pauser's word (the hops, frames, sub-request caps
			// and skipped resource types are its decisions), or, with no pauser, every
			// request of a skipped type is paused to be failed. An endpoint that cannot
			// pause requests cannot render under the limiter: the tab fails (fail closed).
			if _, err := cdp.Call(ctx, tg, fetch.Enable, fetch.EnableParams{Patterns: patterns}); err != nil {
				return fmt.Errorf("pause requests (Fetch.enable): %w", err)
			}
			return nil
		}))
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		t.cancel() // ends the attach; close reads what it left only after it returned
		<-done
		t.close()
		return nil, context.Cause(ctx)
	}
	if err != nil {
		t.close()
		return nil, fmt.Errorf("new tab: %w", err)
	}
	c := chromedp.FromContext(tctx)
	t.mainFrame = cdp.FrameID(c.Target.TargetID)
	u.cancel() // the first use's loop starts with the tab's context
	u.ctx, u.cancel = context.WithCancel(tctx)
	t.start(u)
	t.wg.Go(func() { t.skip.run(tctx) })
	if t.detached, err = chromedp.Detached(tctx); err != nil {
		t.close()
		return nil, fmt.Errorf("new tab: %w", err)
	}
	// Nothing a page downloads is saved.
	if _, err := cdp.Call(ctx, on.b, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorDeny, BrowserContextID: c.BrowserContextID,
	}); err != nil {
		t.close()
		return nil, fmt.Errorf("new tab: deny downloads: %w", err)
	}
	// A JavaScript dialog (alert, confirm, prompt) stops the page until it is answered:
	// dismiss each at once, as a user who says no would.
	dialogs := chromedp.Events(tctx, page.JavascriptDialogOpening)
	t.wg.Go(func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			accept := ev.Type == page.DialogTypeBeforeunload // let the page go
			chromedp.Call(tctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept})
		}
	})
	if t.sc != nil {
		p.mu.Lock()
		p.live++
		t.isLive = true
		p.mu.Unlock()
	}
	return t, nil
}

// setSkip makes the browser skip the resource types of set from now on: one protocol
// round trip when they differ from the tab's (the Fetch patterns name the types; with a
// pauser, the decision is its own, hops.go).
func (t *tab) setSkip(ctx context.Context, set skipSet) error {
	if slices.Equal(set, t.skipping) {
		return nil
	}
	if t.b.prof.interception == interceptProxy {
		t.skipping = set // none to be had (no Fetch.enable)
		return nil
	}
	var err error
	if patterns := fetchPatterns(set, t.pause != nil); len(patterns) == 0 {
		_, err = chromedp.Call(ctx, fetch.Disable, cdp.Empty{})
	} else {
		_, err = chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: patterns})
	}
	if err != nil {
		return fmt.Errorf("skip resource types (Fetch): %w", err)
	}
	t.skipping = set
	return nil
}

// quietAgents turns off the inspector agents chromedp enables on every tab and the pool
// never reads: CSS (an event per stylesheet, with its header, and the agent's bookkeeping
// of every rule), DOM (node ids for the client, and on each new document a
// DOM.documentUpdated after which chromedp asks for the document again: two to four
// round trips per render) and Log (an event per console violation or intervention). The
// page's own work is not touched; measured in docs/benchmarks-render.md. CSS goes before
// DOM, which it needs. Chromium only (another server keeps what it has).
func (p *Pool) quietAgents(ctx context.Context, s cdp.Session, prof profile) error {
	if prof.interception != interceptFetch {
		return nil
	}
	if _, err := cdp.Call(ctx, s, css.Disable, cdp.Empty{}); err != nil {
		return fmt.Errorf("CSS.disable: %w", err)
	}
	if _, err := cdp.Call(ctx, s, dom.Disable, cdp.Empty{}); err != nil {
		return fmt.Errorf("DOM.disable: %w", err)
	}
	if _, err := cdp.Call(ctx, s, cdplog.Disable, cdp.Empty{}); err != nil {
		return fmt.Errorf("cdp Log.disable: %w", err)
	}
	return nil
}

// userAgentOverride replaces the user agent and its client hints (Sec-CH-UA,
// navigator.userAgentData), which would otherwise name HeadlessChrome.
func (p *Pool) userAgentOverride() emulation.SetUserAgentOverrideParams {
	return emulation.SetUserAgentOverrideParams{
		UserAgent: p.cfg.UserAgent,
		UserAgentMetadata: &emulation.UserAgentMetadata{
			Brands:          []*emulation.UserAgentBrandVersion{{Brand: "downloader", Version: "1"}},
			FullVersionList: []*emulation.UserAgentBrandVersion{{Brand: "downloader", Version: "1.0"}},
			Platform:        "Linux",
			Architecture:    "x86",
			Bitness:         "64",
		},
	}
}

// close ends the tab's use, closes the tab and disposes of its browser context (its own,
// or its long-lived one). It blocks until done (a few milliseconds; at most a few seconds
// with a hung browser).
func (t *tab) close() {
	t.closeOne.Do(func() {
		c := chromedp.FromContext(t.ctx)
		t.end(t.use)
		t.cancel() // closes the target and disposes of the context chromedp created
		t.wg.Wait()
		// A context created while its tab never attached is not disposed by chromedp.
		on := t.b
		if t.conn != nil {
			on = t.conn
		}
		if t.sc == nil && c.Target == nil && c.BrowserContextID != "" && on.alive() {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			cdp.Call(ctx, on.b, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: c.BrowserContextID})
			cancel()
		}
		if t.conn != nil {
			t.conn.close() // after the tab: a render's connection ends with it
		}
		if t.sc != nil {
			t.sc.dispose()
			t.p.mu.Lock()
			if t.isLive {
				t.p.live--
				t.isLive = false
			}
			t.p.mu.Unlock()
		}
	})
}

// release gives back a tab whose render (of site; "" if it never rendered) is over: closed
// (IsolationContext), or wiped in the background and made ready for the next render
// (IsolationWipe; see reuse).
func (p *Pool) release(t *tab, site string) {
	if t.sc == nil {
		t.close()
		return
	}
	p.mu.Lock()
	if site != "" {
		t.sc.renders++
		t.sc.sites[site] = true
	}
	p.busy = slices.DeleteFunc(p.busy, func(w *tab) bool { return w == t })
	if p.closed {
		p.mu.Unlock()
		t.close()
		return
	}
	p.warming++ // a render that finds no spare waits for this one
	p.wiping = append(p.wiping, t)
	// A render waiting for this tab's context (affinity.go) now waits for its wipe.
	close(p.spareReady)
	p.spareReady = make(chan struct{})
	p.wg.Go(func() { p.reuse(t) })
	p.mu.Unlock()
}

// reuse ends a long-lived tab's render, wipes it (see siteContext.wipe) and puts it back
// among the spares with a new use, unless it has served its renders, its renderer or
// browser died, or the pool is closing: then it is closed and replaced.
func (p *Pool) reuse(t *tab) {
	origins, docOrigins := t.tr.origins()
	urls := t.tr.urls()
	t.end(t.use)
	p.mu.Lock()
	for _, u := range urls {
		t.sc.requested[u] = true
	}
	keep := !p.closed && p.cur == t.b && t.sc.renders < p.cfg.MaxContextRenders
	p.mu.Unlock()
	keep = keep && t.b.alive() && !t.isDetached() && !t.tr.state().crashed
	if keep {
		wipeStart := p.clk.Now()
		// The heap is asked for beside the wipe, not before it (one round trip less); a
		// tab over the bound is replaced, its wipe wasted.
		heapOver := make(chan bool, 1)
		go func() { heapOver <- p.isHeapOver(t) }()
		err := t.wipe(origins, docOrigins)
		if <-heapOver {
			keep = false
		}
		p.cfg.Trace.tabWiped(p.clk.Now().Sub(wipeStart))
		if err != nil {
			if t.b.alive() && p.ctx.Err() == nil && !errors.Is(err, errReplaceTab) {
				p.log.Warn("render: wiping a tab failed; replacing it", "error", err)
			}
			keep = false
		}
	}
	var u *tabUse
	if keep {
		var err error
		if u, err = p.newUse(t.ctx, t.b.prof, false); err != nil { // a relay's
			p.log.Warn("render: new proxy", "error", err)
			keep = false
		}
	}
	p.mu.Lock()
	p.warming--
	p.wiping = slices.DeleteFunc(p.wiping, func(w *tab) bool { return w == t })
	close(p.spareReady)
	p.spareReady = make(chan struct{})
	if keep && !p.closed && p.cur == t.b {
		t.start(u)
		p.spares = append(p.spares, t)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if u != nil {
		t.end(u)
	}
	t.close()
	p.refill()
}

// takeTab returns a warm tab of b for a render of site: one that is ready (IsolationWipe:
// one whose context rendered site if there is one, for its cache; see affinity.go for when
// the render waits for that context instead of taking another), else the next one being
// made or wiped, else a new one made now (then starting warm-ups, since there are too
// few). affinityUntil bounds the wait for the site's own context while it serves or wipes
// (zero: no wait).
func (p *Pool) takeTab(ctx context.Context, b *browser, site string, affinityUntil time.Time) (*tab, error) {
	if p.cfg.Trace != nil && p.cfg.Trace.TabTaken != nil {
		start := p.clk.Now()
		defer func() { p.cfg.Trace.tabTaken(p.clk.Now().Sub(start)) }()
	}
	var affinity <-chan time.Time // fires when the wait for the site's context is over
	for {
		p.mu.Lock()
		kept := p.spares[:0]
		for _, s := range p.spares {
			if s.b != b || !b.alive() || s.isDetached() || s.tr.state().crashed || s.isGone() {
				p.wg.Go(s.close) // an old browser's or a dead tab; p.mu held, so not closed yet
				continue
			}
			kept = append(kept, s)
		}
		clear(p.spares[len(kept):])
		p.spares = kept
		pick := -1
		for i, s := range p.spares {
			if s.sc != nil && s.sc.sites[site] {
				pick = i
				break
			}
		}
		held := pick < 0 && !affinityUntil.IsZero() && p.siteHeldLocked(site)
		if pick < 0 && len(p.spares) > 0 && !held {
			pick = p.coldPickLocked()
		}
		var t *tab
		if pick >= 0 {
			t = p.spares[pick]
			p.spares = slices.Delete(p.spares, pick, pick+1)
			if t.sc != nil {
				p.busy = append(p.busy, t)
			}
		}
		if held {
			p.awaited[site]++
		}
		warming, ready := p.warming, p.spareReady
		p.mu.Unlock()
		if t != nil {
			// Its replacement is made once this render's page has loaded and its network
			// gone quiet (see renderJob.wait): a renderer starting up while the page loads
			// slows it down.
			return t, nil
		}
		if held {
			// The site's context serves another render or is being wiped: wait for it
			// (every release and every wipe's end wakes this), up to affinityUntil.
			if affinity == nil {
				tm := p.clk.NewTimer(max(affinityUntil.Sub(p.clk.Now()), 0))
				defer tm.Stop()
				affinity = tm.C()
				p.cfg.Trace.affinityWaitStarted(site)
			}
			var err error
			select {
			case <-ready:
			case <-affinity:
				affinityUntil = time.Time{} // from now on any free tab
			case <-ctx.Done():
				err = context.Cause(ctx)
			}
			p.mu.Lock()
			if p.awaited[site]--; p.awaited[site] <= 0 {
				delete(p.awaited, site)
			}
			p.mu.Unlock()
			if err != nil {
				return nil, err
			}
			continue
		}
		if warming == 0 || !b.alive() {
			break
		}
		// Starting one more renderer now would only slow the ones already starting.
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	// With IsolationWipe the tab made here is one of the slot's long-lived tabs: counted
	// as being made, so that refill (the browser's start-up races this render to it) does
	// not make one more than the slots.
	own := p.isWipe(b)
	if own {
		p.mu.Lock()
		p.making++
		p.mu.Unlock()
	}
	p.refill()
	t, err := p.newTab(ctx, b)
	if own {
		p.mu.Lock()
		p.making-- // newTab counted it live before this
		if err == nil {
			p.busy = append(p.busy, t)
		}
		p.mu.Unlock()
	}
	return t, err
}

// isGone reports whether the tab's context ended, or its own connection (a remote
// server's warm connection) was lost, while it waited as a spare.
func (t *tab) isGone() bool {
	return t.ctx.Err() != nil || t.conn != nil && !t.conn.alive()
}

func (t *tab) isDetached() bool {
	select {
	case <-t.detached:
		return true
	default:
		return false
	}
}

// refill starts warm-ups until WarmTabs tabs are ready or being made (IsolationContext),
// or until the pool has a long-lived tab per slot, busy or not, and SpareTabCount more
// (IsolationWipe: a tab is wiped and reused after each render; a spare lets a render
// start while another tab's wipe runs, more would only cost memory).
func (p *Pool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.state != stateUp {
		return
	}
	b := p.cur
	for p.wantMoreLocked() {
		p.warming++
		p.making++
		p.wg.Go(func() { p.warm(b) })
	}
}

// wantMoreLocked reports whether refill should make one more tab. Requires p.mu held.
func (p *Pool) wantMoreLocked() bool {
	if p.isWipe(p.cur) {
		// the effective slots (autoscale.go), and the spares beyond them
		return p.cfg.WarmTabs > 0 && p.live+p.making < p.gate.Capacity()+p.cfg.SpareTabCount
	}
	return len(p.spares)+p.making < p.cfg.WarmTabs
}

func (p *Pool) warm(b *browser) {
	// A tab's start is a few CDP exchanges with a live browser. Were one never answered
	// (seen under heavy load: a new target's Runtime.enable left unanswered for good by a
	// browser that went on answering everything else), an unbounded warm-up would hold
	// every render that waits for it (takeTab) until its own timeout, and the next ones
	// after it: the pool would render nothing until the browser was lost. It is bounded
	// as a launch is; the renders it held then make their own tab under their own
	// deadline.
	ctx, cancel := context.WithTimeoutCause(p.ctx, p.cfg.LaunchTimeout, errTabStartTimeout)
	t, err := p.newTab(ctx, b)
	cancel()
	p.mu.Lock()
	p.warming--
	p.making--
	close(p.spareReady) // wake renders waiting for this warm-up, whatever its result
	p.spareReady = make(chan struct{})
	if err == nil && !p.closed && p.cur == b && b.alive() {
		p.spares = append(p.spares, t)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if err != nil {
		if b.alive() && p.ctx.Err() == nil {
			p.log.Warn("warm tab", "error", err)
		}
		return
	}
	t.close()
}

// isWipe reports whether b's tabs are long-lived and wiped (IsolationWipe), which a server
// that cannot wipe a context (Obscura: profile.contextPerRender) never gets: its renders
// each have a fresh context instead.
func (p *Pool) isWipe(b *browser) bool {
	return p.cfg.Isolation == IsolationWipe && (b == nil || !b.prof.contextPerRender)
}

// connLost is closed when the tab's own connection is lost; nil (never ready) when the tab
// is on the pool's connection.
func (t *tab) connLost() <-chan struct{} {
	if t.conn == nil {
		return nil
	}
	return t.conn.lost
}

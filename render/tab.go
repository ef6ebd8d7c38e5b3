package render

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// closeTimeout bounds the disposal of a browser context that chromedp could not dispose
// of itself.
const closeTimeout = 5 * time.Second

// tab is one fresh tab in its own new browser context, with its own proxy. It serves one
// render at most and is then closed with its context.
type tab struct {
	p        *Pool
	b        *browser
	sc       *siteContext    // the long-lived context it is in (IsolationWipe); nil: its own
	site     string          // the domain it rendered, once it has
	rendered bool            // it served a render
	healthy  bool            // made whole (its context wiped): sc may serve again
	ctx      context.Context // chromedp context of the tab
	cancel   context.CancelFunc
	detached <-chan struct{} // closed when the browser detaches the tab
	proxy    *proxy
	tr       *tracker
	pause    *pauser        // nil when the pool admits no hops
	skip     *skipper       // fails the requests of skipped types
	skipping skipSet        // the types the browser pauses for skip now
	wg       sync.WaitGroup // the dialog handler, the pauser and its admission waits
	closeOne sync.Once
}

// newTab makes a tab with a new proxy of ours, and sets our user agent in it. With
// IsolationContext the tab is in a new browser context whose proxy is that proxy; with
// IsolationWipe it is in a long-lived context (one that rendered site, if one is idle),
// whose relay then leads to that proxy, and the context is wiped first. It gives up when
// ctx ends.
func (p *Pool) newTab(ctx context.Context, b *browser, site string) (*tab, error) {
	var sc *siteContext
	var dirty []string
	if p.cfg.Isolation == IsolationWipe {
		var err error
		if sc, err = p.contextFor(ctx, b, site); err != nil {
			return nil, err
		}
		p.mu.Lock()
		dirty = slices.Clone(sc.dirty)
		p.mu.Unlock()
	}
	px, err := p.newProxy()
	if err != nil {
		if sc != nil {
			p.contextDone(sc, "", nil, false)
		}
		return nil, err
	}
	tr := newTracker()
	opts := []chromedp.ContextOption{chromedp.WithListener(tr.onEvent)}
	if sc != nil {
		sc.relay.attach(px.addr())
		opts = append(opts, chromedp.WithExistingBrowserContext(sc.id))
	} else {
		opts = append(opts, chromedp.WithNewBrowserContext(func(params *target.CreateBrowserContextParams) {
			params.ProxyServer = "http://" + px.addr()
			// Chrome sends loopback destinations around a proxy unless told not to; ours
			// must see them (the guard refuses them unless --connect-to maps them).
			params.ProxyBypassList = "<-loopback>"
		}))
	}
	t := &tab{p: p, b: b, sc: sc, proxy: px, tr: tr, skip: newSkipper(tr), skipping: p.skipDefault}
	if p.cfg.Hops != nil {
		t.pause = newPauser(p.cfg.Hops, p.cfg.frames, p.log, &t.wg)
	}
	opts = append(opts, chromedp.WithListener(t.pausedRouter))
	patterns := fetchPatterns(t.skipping, t.pause != nil)
	tctx, cancel := chromedp.NewContext(b.ctx, opts...)
	t.ctx, t.cancel = tctx, cancel

	// The first Run attaches the tab and binds its event loop to tctx, which therefore has
	// no deadline of its own; ctx bounds the wait.
	done := make(chan error, 1)
	go func() {
		done <- chromedp.Do(tctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			if sc != nil {
				// Before anything can load: no page of this context may find what the
				// last one left.
				if err := sc.wipe(ctx, tg, dirty); err != nil {
					return err
				}
			}
			if _, err := cdp.Call(ctx, tg, emulation.SetUserAgentOverride, p.userAgentOverride()); err != nil {
				return err
			}
			if len(patterns) == 0 {
				return nil
			}
			// Every document request waits for the pauser's word, and every request of a
			// skipped type is paused to be failed. An endpoint that cannot pause requests
			// cannot render under the limiter: the tab fails (fail closed).
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
	if sc != nil {
		p.mu.Lock()
		sc.dirty = slices.DeleteFunc(sc.dirty, func(o string) bool { return slices.Contains(dirty, o) })
		p.mu.Unlock()
	}
	t.healthy = true
	c := chromedp.FromContext(tctx)
	tr.setMainFrame(cdp.FrameID(c.Target.TargetID))
	if t.pause != nil {
		t.pause.setMainFrame(cdp.FrameID(c.Target.TargetID))
		t.wg.Go(func() { t.pause.run(tctx) })
	}
	t.wg.Go(func() { t.skip.run(tctx) })
	if t.detached, err = chromedp.Detached(tctx); err != nil {
		t.close()
		return nil, fmt.Errorf("new tab: %w", err)
	}
	// Nothing a page downloads is saved.
	if _, err := cdp.Call(ctx, b.b, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
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
	return t, nil
}

// setSkip makes the browser skip the resource types of set from now on (one protocol
// round trip when they differ from the tab's).
func (t *tab) setSkip(ctx context.Context, set skipSet) error {
	if slices.Equal(set, t.skipping) {
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

// close closes the tab and disposes of its own browser context, then closes its proxy; a
// long-lived context is given back to the pool instead, with the origins the tab touched
// to wipe. It blocks until done (a few milliseconds; at most a few seconds with a hung
// browser).
func (t *tab) close() {
	t.closeOne.Do(func() {
		c := chromedp.FromContext(t.ctx)
		t.cancel() // closes the target and disposes of the context it created
		t.wg.Wait()
		// A context created while its tab never attached is not disposed by chromedp.
		if t.sc == nil && c.Target == nil && c.BrowserContextID != "" && t.b.alive() {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			cdp.Call(ctx, t.b.b, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: c.BrowserContextID})
			cancel()
		}
		if t.sc != nil {
			t.sc.relay.detach() // before the proxy goes: nothing of this tab's stays open
		}
		t.proxy.close()
		if t.sc != nil {
			if t.healthy {
				t.p.contextDone(t.sc, t.site, t.tr.origins(), t.rendered)
			} else {
				t.sc.dispose() // its wipe failed, or its tab never came: start afresh
			}
		}
	})
}

// takeTab returns a tab of b for a render of site: a warm one that is ready (in a context
// that rendered site, if there is one), else a new one made now in an idle context that
// rendered site (IsolationWipe: its cache is worth the tab's start), else the next warm
// tab being made, else a new one made now (then starting warm-ups, since there are too
// few).
func (p *Pool) takeTab(ctx context.Context, b *browser, site string) (*tab, error) {
	for {
		p.mu.Lock()
		var t *tab
		kept := p.spares[:0]
		for _, s := range p.spares {
			if s.b != b || !b.alive() || s.isDetached() || s.tr.state().crashed {
				p.wg.Go(s.close) // an old browser's or a dead tab; p.mu held, so not closed yet
				continue
			}
			kept = append(kept, s)
		}
		p.spares = kept
		pick := -1
		for i, s := range p.spares {
			if s.sc != nil && s.sc.sites[site] {
				pick = i
				break
			}
		}
		if pick < 0 && len(p.spares) > 0 {
			if p.idleHasSiteLocked(b, site) {
				p.mu.Unlock()
				p.refill()
				return p.newTab(ctx, b, site)
			}
			pick = 0
		}
		if pick >= 0 {
			t = p.spares[pick]
			p.spares = slices.Delete(p.spares, pick, pick+1)
		}
		warming, ready := p.warming, p.spareReady
		p.mu.Unlock()
		if t != nil {
			// Its replacement is made once this render's page has loaded and its network
			// gone quiet (see renderJob.wait): a renderer starting up while the page loads
			// slows it down.
			return t, nil
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
	p.refill()
	return p.newTab(ctx, b, site)
}

// idleHasSiteLocked reports whether an idle context of b rendered site. Requires p.mu held.
func (p *Pool) idleHasSiteLocked(b *browser, site string) bool {
	for _, sc := range p.idle {
		if sc.b == b && sc.sites[site] {
			return true
		}
	}
	return false
}

func (t *tab) isDetached() bool {
	select {
	case <-t.detached:
		return true
	default:
		return false
	}
}

// refill starts warm-ups until WarmTabs tabs are ready or being made.
func (p *Pool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.state != stateUp {
		return
	}
	b := p.cur
	for len(p.spares)+p.warming < p.cfg.WarmTabs {
		p.warming++
		p.wg.Go(func() { p.warm(b) })
	}
}

func (p *Pool) warm(b *browser) {
	t, err := p.newTab(p.ctx, b, "")
	p.mu.Lock()
	p.warming--
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

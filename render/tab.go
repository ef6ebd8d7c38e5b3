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
	b        *browser
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

// newTab makes a tab in a new browser context whose proxy is a new proxy of ours, and
// sets our user agent in it. It gives up when ctx ends.
func (p *Pool) newTab(ctx context.Context, b *browser) (*tab, error) {
	px, err := p.newProxy()
	if err != nil {
		return nil, err
	}
	tr := newTracker()
	opts := []chromedp.ContextOption{
		chromedp.WithNewBrowserContext(func(params *target.CreateBrowserContextParams) {
			params.ProxyServer = "http://" + px.addr()
			// Chrome sends loopback destinations around a proxy unless told not to; ours
			// must see them (the guard refuses them unless --connect-to maps them).
			params.ProxyBypassList = "<-loopback>"
		}),
		chromedp.WithListener(tr.onEvent),
	}
	t := &tab{b: b, proxy: px, tr: tr, skip: newSkipper(tr), skipping: p.skipDefault}
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

// close closes the tab and disposes of its browser context, then closes its proxy. It
// blocks until done (a few milliseconds; at most a few seconds with a hung browser).
func (t *tab) close() {
	t.closeOne.Do(func() {
		c := chromedp.FromContext(t.ctx)
		t.cancel() // closes the target and disposes of the context it created
		t.wg.Wait()
		// A context created while its tab never attached is not disposed by chromedp.
		if c.Target == nil && c.BrowserContextID != "" && t.b.alive() {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			cdp.Call(ctx, t.b.b, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: c.BrowserContextID})
			cancel()
		}
		t.proxy.close()
	})
}

// takeTab returns a warm tab of b: one that is ready, else the next one being made, else a
// new one made now (then starting warm-ups, since there are too few).
func (p *Pool) takeTab(ctx context.Context, b *browser) (*tab, error) {
	for {
		p.mu.Lock()
		var t *tab
		for len(p.spares) > 0 && t == nil {
			s := p.spares[0]
			p.spares = p.spares[1:]
			if s.b == b && b.alive() && !s.isDetached() && !s.tr.state().crashed {
				t = s
				continue
			}
			p.wg.Go(s.close) // an old browser's or a dead tab; p.mu held, so not closed yet
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
	return p.newTab(ctx, b)
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
	t, err := p.newTab(p.ctx, b)
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

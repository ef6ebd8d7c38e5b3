package render

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/chromedp/chromedp"

	"downloader/render/chromium"
)

// stableUptime is how long a browser must have lived for its loss to count as a crash
// rather than a failed start: a browser that dies sooner is relaunched after a backoff.
const stableUptime = 10 * time.Second

// browser is one launched or connected browser. Its contexts end when it is closed or
// lost.
type browser struct {
	ctx      context.Context // chromedp context that owns the browser (or the connection)
	b        *chromedp.Browser
	lost     <-chan struct{} // closed when the connection (or the process) is gone
	proc     *os.Process     // nil for a remote endpoint
	started  time.Time
	gen      int
	prof     profile // what this server does with our calls (profile.go)
	closeFn  func()
	closeOne sync.Once
}

// close ends the browser: kills the local process and waits until it has exited and its
// temporary user data directory is removed, or closes the connection to a remote one.
func (b *browser) close() { b.closeOne.Do(b.closeFn) }

func (b *browser) alive() bool {
	select {
	case <-b.lost:
		return false
	default:
		return true
	}
}

// supervise keeps a browser up until the pool closes: it launches (or connects), waits
// for the browser to be lost, and starts again. Failed attempts back off exponentially.
func (p *Pool) supervise() {
	failures := 0
	for gen := 1; ; gen++ {
		b, err := p.launch(gen)
		if err == nil {
			if err = p.admitBrowser(b); err != nil {
				b.close()
			}
		}
		if err != nil {
			failures++
			wait := backoff(failures)
			p.log.Warn("renderer unavailable", "error", err, "attempt_count", failures, "retry_in_ms", wait.Milliseconds())
			p.setState(stateFailed, nil, err)
			if !p.sleep(wait) {
				return
			}
			p.setState(stateLaunching, nil, err)
			continue
		}
		p.log.Info("renderer up", "generation", gen, "is_remote", p.cfg.Endpoint != "")
		p.setState(stateUp, b, nil)
		p.refill()

		select {
		case <-b.lost:
		case <-p.ctx.Done():
			p.dropBrowser(b)
			return
		}
		if p.ctx.Err() != nil {
			// Close cancels the pool and with it the browser: both are ready, and a
			// browser closed on purpose is not a lost one (no WARN on a clean stop).
			p.dropBrowser(b)
			return
		}
		uptime := p.clk.Now().Sub(b.started)
		if p.cfg.IsStopping != nil && p.cfg.IsStopping() {
			p.log.Info("renderer gone while stopping", "generation", gen, "uptime_ms", uptime.Milliseconds())
		} else {
			p.log.Warn("renderer lost", "generation", gen, "uptime_ms", uptime.Milliseconds())
		}
		p.mu.Lock()
		p.restarts++
		p.mu.Unlock()
		p.setState(stateLaunching, nil, nil)
		p.dropBrowser(b)
		if uptime < stableUptime {
			failures++
			if !p.sleep(backoff(failures)) {
				return
			}
		} else {
			failures = 0
		}
	}
}

// dropBrowser forgets b's warm tabs and closes b.
func (p *Pool) dropBrowser(b *browser) {
	p.mu.Lock()
	var keep, drop []*tab
	for _, t := range p.spares {
		if t.b == b {
			drop = append(drop, t)
		} else {
			keep = append(keep, t)
		}
	}
	p.spares = keep
	p.mu.Unlock()
	for _, t := range drop {
		t.close()
	}
	b.close()
}

// sleep waits d on the pool's clock; false when the pool closed first.
func (p *Pool) sleep(d time.Duration) bool {
	t := p.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-p.ctx.Done():
		return false
	}
}

func backoff(failures int) time.Duration {
	d := minBackoff
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

func (p *Pool) setState(s browserState, b *browser, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state, p.cur = s, b
	if s == stateUp {
		p.lastErr = nil
	} else if err != nil {
		p.lastErr = err
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// errUnavailable wraps the reason the browser cannot be used.
type errUnavailable struct{ err error }

func (e *errUnavailable) Error() string { return fmt.Sprintf("renderer unavailable: %v", e.err) }
func (e *errUnavailable) Unwrap() error { return e.err }

// browserFor returns the live browser, waiting while one is being launched. It fails at
// once with *errUnavailable while the last attempt has failed.
func (p *Pool) browserFor(ctx context.Context) (*browser, error) {
	for {
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			return nil, errPoolClosed
		case p.state == stateUp && p.cur.alive():
			b := p.cur
			p.mu.Unlock()
			return b, nil
		case p.state == stateFailed:
			err := p.lastErr
			p.mu.Unlock()
			return nil, &errUnavailable{err}
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, &errUnavailable{fmt.Errorf("no browser before the render's end: %w", context.Cause(ctx))}
		}
	}
}

// launch starts the local browser or connects to the endpoint, bounded by LaunchTimeout.
func (p *Pool) launch(gen int) (*browser, error) {
	var allocCtx context.Context
	var allocCancel context.CancelFunc
	if endpoint := p.cfg.Endpoint; endpoint != "" || p.cfg.browser != nil {
		if endpoint == "" {
			// A running local browser (seams): its own connection, the local profile.
			endpoint = p.cfg.browser.websocketURL()
		}
		a := &remoteAllocator{endpoint: endpoint, dialTimeout: p.cfg.LaunchTimeout}
		var cancel context.CancelFunc
		allocCtx, cancel = chromedp.NewAllocatorContext(p.ctx, a)
		allocCancel = func() {
			cancel()
			a.Wait()
		}
	} else {
		a, err := chromium.NewAllocator(p.ctx, p.cfg.BinaryPath, p.clk.Now(), p.execOptions()...)
		if err != nil {
			return nil, err
		}
		if a.Swept > 0 {
			p.log.Info("render: removed the browser profiles of dead runs", "profile_count", a.Swept)
		}
		allocCtx = a.Ctx
		allocCancel = func() {
			if err := a.Close(); err != nil {
				p.log.Warn("render: browser profile", "error", err)
			}
		}
	}
	logf := func(format string, args ...any) { p.log.Debug("chromedp", "message", fmt.Sprintf(format, args...)) }
	errf := func(format string, args ...any) {
		p.log.Debug("chromedp error", "message", fmt.Sprintf(format, args...))
	}
	ctxOpts := []chromedp.ContextOption{chromedp.WithLogf(logf), chromedp.WithErrorf(errf)}
	if debugf := p.cfg.Trace.cdpMessagef(); debugf != nil {
		ctxOpts = append(ctxOpts, chromedp.WithDebugf(debugf))
	}
	rootCtx, rootCancel := chromedp.NewContext(allocCtx, ctxOpts...)
	// closeFn runs once: chromedp's cancel waits for its allocation token, and when no
	// browser was ever allocated (the pool closed during the launch) a second call waits
	// for a token that the first one took, for ever.
	var closeOnce sync.Once
	closeFn := func() {
		closeOnce.Do(func() {
			rootCancel()
			allocCancel()
		})
	}

	// The first call binds the browser to rootCtx, which must not have a deadline: the
	// launch is bounded by a timer instead.
	done := make(chan error, 1)
	go func() {
		_, err := chromedp.Targets(rootCtx)
		done <- err
	}()
	t := p.clk.NewTimer(p.cfg.LaunchTimeout)
	defer t.Stop()
	var err error
	select {
	case err = <-done:
	case <-t.C():
		err = fmt.Errorf("no browser after %v", p.cfg.LaunchTimeout)
		closeFn()
		<-done
	case <-p.ctx.Done():
		err = errPoolClosed
		closeFn()
		<-done
	}
	if err != nil {
		closeFn()
		if p.cfg.Endpoint != "" {
			return nil, fmt.Errorf("connect to %s: %w", p.cfg.Endpoint, err)
		}
		if p.cfg.browser != nil {
			return nil, fmt.Errorf("connect to the running browser %s: %w", p.cfg.browser.websocketURL(), err)
		}
		return nil, fmt.Errorf("launch %s: %w", p.cfg.BinaryPath, err)
	}
	c := chromedp.FromContext(rootCtx)
	lost := c.Browser.LostConnection
	b := &browser{
		ctx:     rootCtx,
		b:       c.Browser,
		lost:    lost,
		proc:    c.Browser.Process(),
		started: p.clk.Now(),
		gen:     gen,
		closeFn: func() {
			closeFn()
			// The connection's close handshake finishes after the cancellation; wait for
			// it (a remote peer that never answers is given up after a second by chromedp).
			t := p.clk.NewTimer(closeTimeout)
			defer t.Stop()
			select {
			case <-lost:
			case <-t.C():
			}
		},
	}
	return b, nil
}

// execOptions are the local browser's flags. Besides headless operation they turn off
// everything that would make the browser talk to Google's hosts by itself, and point the
// browser's default context at a proxy that refuses everything: only our per-render
// contexts, each with its own guarded proxy, may reach the network.
func (p *Pool) execOptions() []chromedp.ExecAllocatorOption {
	return localFlags(p.cfg.BinaryPath, p.cfg.UserAgent, p.deny.Addr().String(), p.cfg.extraFlags)
}

// localFlags are a local browser's flags: binaryPath's, userAgent's, the default
// context's proxy at denyAddr (a listener that refuses everything) and extra flags set.
func localFlags(binaryPath, userAgent, denyAddr string, extra []string) []chromedp.ExecAllocatorOption {
	opts := append(chromium.Flags(binaryPath, userAgent),
		chromedp.Flag("proxy-server", "http://"+denyAddr),
		chromedp.Flag("proxy-bypass-list", "<-loopback>"),
		chromium.KillTreeOnCancel(),
	)
	for _, f := range extra {
		opts = append(opts, chromedp.Flag(f, true))
	}
	return opts
}

// isBrowserGone reports whether err says the browser connection or the tab is gone.
func isBrowserGone(err error) bool {
	return errors.Is(err, chromedp.ErrTargetDetached) || errors.Is(err, chromedp.ErrChannelClosed)
}

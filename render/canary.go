package render

import (
	"context"
	"crypto/rand"
	"downloader/render/renderproxy"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// errBypassesGuard is why an endpoint is refused: the canary's requests did not reach our
// proxy, so a render's would not either.
var errBypassesGuard = errors.New("the renderer sends requests around our guard")

// navigateParams is Page.navigate with the waitUntil Obscura reads (cdproto has no such
// field; Chromium ignores it).
type navigateParams struct {
	URL string `json:"url"`
	// naming:external (Obscura's Page.navigate parameter)
	WaitUntil string `json:"waitUntil,omitempty"`
}

var navigateWaitUntil = cdp.Command[navigateParams, page.NavigateResult]{Method: page.CommandNavigate}

// checkGuard renders the canary on the browser of browserCtx (a chromedp context) before any render may use it: a page on a name only
// our guard proxy g answers (renderproxy.CanarySuffix), whose script is a second request to it. The
// endpoint is accepted only when g saw both: with prof's proxy mode, every request of a
// render goes through our guard. Otherwise the endpoint must not render, and the error
// says what to change. No origin is ever contacted: a server that sends the canary
// elsewhere sends it to a name that does not resolve.
//
// The profile's proxy mode decides where the canary's context is told to send it: to g
// through the context's proxyServer (Chromium), or nowhere (a server-wide proxy, which
// must be g: Obscura's `serve --proxy`).
func checkGuard(ctx, browserCtx context.Context, g *renderproxy.Guard, prof profile) error {
	var tok [12]byte
	rand.Read(tok[:])
	// A terminating guard proxy (renderproxy/authority.go) must also be trusted: the canary's
	// sub-request is then https://, and reaches us only through our TLS.
	isTLS := prof.proxy == proxyServerWide && g.CA() != nil
	probe, cancelProbe := g.ExpectCanary(hex.EncodeToString(tok[:]), isTLS)
	defer cancelProbe()

	tctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext(func(params *target.CreateBrowserContextParams) {
		if prof.proxy == proxyPerContext {
			params.ProxyServer = "http://" + g.Addr()
			params.ProxyBypassList = "<-loopback>"
		}
	}))
	defer cancel() // closes the canary's tab and disposes of its context

	done := make(chan error, 1)
	go func() {
		_, err := chromedp.Call(tctx, navigateWaitUntil, navigateParams{URL: probe.URL(), WaitUntil: prof.waitUntil})
		done <- err
	}()
	var navErr error
	select {
	case navErr = <-done:
	case <-ctx.Done():
		cancel()
		<-done
		return fmt.Errorf("canary: %w", context.Cause(ctx))
	}
	// The page's script is fetched after the document; Chromium answers Page.navigate at
	// commit, before it.
	select {
	case <-probe.Document():
	default:
		return canaryRefusal(prof, "its page never reached our proxy", navErr)
	}
	select {
	case <-probe.SubSeen():
		return nil
	case <-ctx.Done():
		if isTLS {
			return canaryRefusal(prof, "its https:// sub-request never reached our proxy through our TLS: the server does not trust our CA; start it with SSL_CERT_FILE="+g.CA().CertPath(), navErr)
		}
		return canaryRefusal(prof, "its sub-request never reached our proxy", navErr)
	}
}

// canaryRefusal is the error of a failed canary, with what the operator must change.
func canaryRefusal(prof profile, what string, navErr error) error {
	fix := "it must honour a browser context's proxyServer; an Obscura endpoint needs --renderer-kind=obscura (or is detected as one) and `obscura serve --proxy` pointed at our guard proxy"
	if prof.proxy == proxyServerWide {
		fix = "start it with `obscura serve --proxy http://<render_proxy_listen>` (our guard proxy), and never with --allow-private-network"
	}
	if navErr != nil {
		return fmt.Errorf("%w: canary: %s (navigation: %v); %s", errBypassesGuard, what, navErr, fix)
	}
	return fmt.Errorf("%w: canary: %s; %s", errBypassesGuard, what, fix)
}

// admitBrowser decides whether b may render, before any render uses it. A local browser is
// ours (launched with our flags, its default context pointed at the deny listener): it
// gets Chromium's profile. A remote endpoint gets the profile of its kind (Config.Kind,
// else told from /json/version) and must pass the canary first; one that does not is
// refused, with one clear log line when it starts to be, and renders answer
// renderer_unavailable until a later connection passes (supervise retries with backoff).
func (p *Pool) admitBrowser(b *browser) error {
	if p.cfg.Endpoint == "" {
		b.prof = profileFor(RendererChromium)
		p.setAdmission(RendererChromium, false)
		return nil
	}
	ctx, cancel := context.WithCancelCause(p.ctx)
	defer cancel(nil)
	timer := p.clk.NewTimer(p.cfg.LaunchTimeout)
	defer timer.Stop()
	go func() {
		select {
		case <-timer.C():
			cancel(fmt.Errorf("no canary answer after %v", p.cfg.LaunchTimeout))
		case <-ctx.Done():
		}
	}()
	kind := p.cfg.Kind
	if kind == RendererAuto {
		kind = RendererChromium
		if v, err := readVersion(ctx, p.cfg.Endpoint); err != nil {
			p.log.Warn("render: cannot read the endpoint's /json/version; taking it for Chromium", "error", err)
		} else {
			kind = detectKind(v)
		}
	}
	b.prof = profileFor(kind)
	start := p.clk.Now()
	err := checkGuard(ctx, b.ctx, p.guard, b.prof)
	isRefused := errors.Is(err, errBypassesGuard)
	if wasRefused := p.setAdmission(kind, isRefused); isRefused && !wasRefused {
		p.log.Error("renderer refused: its requests go around our guard; renders answer renderer_unavailable until it is reconfigured",
			"renderer_kind", string(kind), "guard_proxy_addr", p.guard.Addr(), "error", err)
	} else if err == nil && wasRefused {
		p.log.Info("renderer accepted: the canary now goes through our guard", "renderer_kind", string(kind))
	}
	if err != nil {
		return err
	}
	p.log.Debug("render: canary passed", "renderer_kind", string(kind), "elapsed_ms", p.clk.Now().Sub(start).Milliseconds())
	return nil
}

// setAdmission records the last connection's kind and whether it was refused, and
// returns whether the one before was.
func (p *Pool) setAdmission(kind RendererKind, isRefused bool) (wasRefused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wasRefused, p.kind, p.refused = p.refused, kind, isRefused
	return wasRefused
}

package render

import (
	"context"
	"crypto/rand"
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
// our guard proxy g answers (canarySuffix), whose script is a second request to it. The
// endpoint is accepted only when g saw both: with prof's proxy mode, every request of a
// render goes through our guard. Otherwise the endpoint must not render, and the error
// says what to change. No origin is ever contacted: a server that sends the canary
// elsewhere sends it to a name that does not resolve.
//
// The profile's proxy mode decides where the canary's context is told to send it: to g
// through the context's proxyServer (Chromium), or nowhere (a server-wide proxy, which
// must be g: Obscura's `serve --proxy`).
func checkGuard(ctx, browserCtx context.Context, g *guardProxy, prof profile) error {
	var tok [12]byte
	rand.Read(tok[:])
	probe, cancelProbe := g.expectCanary(hex.EncodeToString(tok[:]))
	defer cancelProbe()

	tctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext(func(params *target.CreateBrowserContextParams) {
		if prof.proxy == proxyPerContext {
			params.ProxyServer = "http://" + g.addr()
			params.ProxyBypassList = "<-loopback>"
		}
	}))
	defer cancel() // closes the canary's tab and disposes of its context

	done := make(chan error, 1)
	go func() {
		_, err := chromedp.Call(tctx, navigateWaitUntil, navigateParams{URL: probe.url(), WaitUntil: prof.waitUntil})
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
	case <-probe.document:
	default:
		return canaryRefusal(prof, "its page never reached our proxy", navErr)
	}
	select {
	case <-probe.subSeen:
		return nil
	case <-ctx.Done():
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

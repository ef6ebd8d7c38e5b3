package render

import (
	"context"
	"errors"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
)

// The calls a profile changes, in one place (docs/renderers.md).

// networkUserAgentParams is Network.setUserAgentOverride, which cdproto no longer has
// (Chromium moved it to Emulation) and Obscura still reads, for the header.
type networkUserAgentParams struct {
	// naming:external (CDP's Network.setUserAgentOverride parameter)
	UserAgent string `json:"userAgent"`
}

var networkSetUserAgent = cdp.Command[networkUserAgentParams, cdp.Empty]{Method: "Network.setUserAgentOverride"}

// setUserAgent puts our user agent in the tab of s as prof says: Emulation (header,
// navigator.userAgent and client hints) on Chromium; the header on Obscura, where
// Emulation.setUserAgentOverride is a no-op (`obscura serve --user-agent` sets the same
// for every page).
func (p *Pool) setUserAgent(ctx context.Context, s cdp.Session, prof profile) error {
	if prof.userAgent == userAgentHeader {
		_, err := cdp.Call(ctx, s, networkSetUserAgent, networkUserAgentParams{UserAgent: p.cfg.UserAgent})
		return err
	}
	_, err := cdp.Call(ctx, s, emulation.SetUserAgentOverride, p.userAgentOverride())
	return err
}

// navigate is Page.navigate with the profile's waitUntil: Obscura sends a page's events in
// one batch once its navigation ends, so it is asked to end it only once the network is
// idle.
func navigate(ctx context.Context, s cdp.Session, prof profile, url string) (page.NavigateResult, error) {
	if prof.waitUntil == "" {
		return cdp.Call(ctx, s, page.Navigate, page.NavigateParams{URL: url})
	}
	return cdp.Call(ctx, s, navigateWaitUntil, navigateParams{URL: url, WaitUntil: prof.waitUntil})
}

// navigationCDPError returns the message of err when it is the server's CDP error answer
// (not a lost connection or our own context's end): how Obscura answers a navigation that
// failed.
func navigationCDPError(err error) (string, bool) {
	var ce *cdproto.Error
	if errors.As(err, &ce) {
		return ce.Message, true
	}
	return "", false
}

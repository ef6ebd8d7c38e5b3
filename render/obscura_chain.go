package render

import (
	"context"
	"downloader/render/renderproxy"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"downloader"
)

// maxChainHops is how many redirects a navigation follows, as Obscura's own navigation
// does (REDIRECT_LIMIT); past it the render fails as a redirect loop.
const maxChainHops = 10

// resolveChain follows the main document's redirects with our own requests, through the
// render's proxy (the Guard, --connect-to and the wire gate as for the browser's), each
// hop after the first admitted through the render's hop admitter before it is sent, then returns the
// final URL: the one Obscura is made to navigate to (profile.resolveRedirects).
//
// Obscura follows redirects inside its HTTP client, and an HTTPS one reaches our proxy as
// a CONNECT, which says nothing of being a main document: its hop to another host could
// not be admitted there. Resolved first, the chain's every host is admitted before a byte
// goes to it, and Obscura only asks for the final document (a second request to that
// host, under the same admission as the page's sub-requests: docs/renderers.md). Cookies
// the chain set are handed to the context first, as a browser would carry them.
//
// A nil outcome: navigate to the URL returned. Otherwise the render ends with it.
func (j *renderJob) resolveChain(ctx context.Context, t *tab) (string, *downloader.Outcome) {
	tr := &http.Transport{
		Proxy:              http.ProxyURL(&url.URL{Scheme: "http", Host: t.proxy.Addr()}),
		ProxyConnectHeader: http.Header{renderproxy.ChainHeader: {t.proxy.Token()}},
		TLSClientConfig:    j.p.cfg.chainTLS.Clone(),
		DisableCompression: true,
	}
	defer tr.CloseIdleConnections()
	jar, _ := cookiejar.New(nil) // the chain's own cookies, as a browser carries them along it
	h := j.st.proxyHops()
	var cookies []*network.CookieParam
	cur := j.u
	for hop := 0; ; hop++ {
		if hop > maxChainHops {
			return "", downloader.FailedBy(netErrorCause("ERR_TOO_MANY_REDIRECTS"))
		}
		domain, err := downloader.CanonicalHost(cur.Hostname())
		if err != nil {
			return "", downloader.FailedBy(downloader.CauseInvalidURL)
		}
		if h != nil && !h.admitDomain(domain) {
			return "", downloader.FailedBy(downloader.CauseHopRefused)
		}
		resp, err := j.chainRequest(ctx, tr, jar, t, cur)
		if err != nil {
			return "", downloader.FailedBy(j.chainFailure(ctx, t, cur, err))
		}
		if c := renderproxy.MarkCause(resp.Header.Get(renderproxy.ErrorHeader), t.proxy.Token()); c != downloader.CauseReported {
			resp.Body.Close()
			return "", downloader.FailedBy(c)
		}
		for _, c := range resp.Cookies() {
			cookies = append(cookies, cookieParam(cur, c))
		}
		loc := resp.Header.Get("Location")
		// The final document is Obscura's to fetch: ours is not read.
		resp.Body.Close()
		if otherSchemeRedirect(int64(resp.StatusCode), loc) {
			// A redirect to a scheme no render fetches: the origin's bad answer (SPEC §4),
			// as on Chromium's profile; the server is not sent to it.
			out := downloader.FailedBy(downloader.CauseHTTPStatus)
			out.HTTPStatus = resp.StatusCode
			out.FinalURL = cur.String()
			out.HealthSignal.ContentType = resp.Header.Get("Content-Type")
			out.HealthSignal.RedirectCount = j.st.chainRedirectCount()
			return "", out
		}
		next, err := downloader.ParseLocation(cur, loc)
		if !isRedirect(resp.StatusCode) || loc == "" || err != nil || (next.Scheme != "http" && next.Scheme != "https") {
			break
		}
		next.Fragment, next.RawFragment = cur.Fragment, cur.RawFragment
		cur = next
		j.st.countChainRedirect()
	}
	if len(cookies) > 0 {
		if _, err := chromedp.Call(ctx, network.SetCookies, network.SetCookiesParams{Cookies: cookies}); err != nil {
			return "", downloader.FailedBy(j.stopped(ctx, t, fmt.Errorf("the redirect chain's cookies: %w", err)))
		}
	}
	if h != nil {
		h.expect(cur)
	}
	return cur.String(), nil
}

// chainRequest sends one GET of the chain as a browser's navigation would look: our user
// agent, a document's Accept and fetch metadata.
func (j *renderJob) chainRequest(ctx context.Context, tr http.RoundTripper, jar http.CookieJar, t *tab, u *url.URL) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", j.p.cfg.UserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	req.Header.Set("Sec-Fetch-Dest", "document")
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	if u.Scheme == "http" {
		req.Header.Set(renderproxy.ChainHeader, t.proxy.Token())
	}
	for _, c := range jar.Cookies(u) {
		req.AddCookie(c)
	}
	// The transport, not an http.Client: a client reads every 3xx's Location before
	// anything else and fails the request when it is no URL, which is the origin's bad
	// answer (SPEC §4), http_status_error with its status, not a failure on the path.
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	jar.SetCookies(u, resp.Cookies())
	return resp, nil
}

// chainFailure is the cause of a chain request that got no answer: what our proxy
// recorded for the host (a CONNECT it could not make), else the error itself.
func (j *renderJob) chainFailure(ctx context.Context, t *tab, u *url.URL, err error) downloader.Cause {
	if ctx.Err() != nil {
		return j.stopped(ctx, t, err)
	}
	if c := j.st.tunnelFailure(renderproxy.HostPort(u.String())); c != downloader.CauseReported {
		return c
	}
	if renderproxy.IsTLSError(err) {
		return downloader.CauseTLSFailed
	}
	return errorCause(err)
}

func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// cookieParam is a cookie set by a response to u, for Network.setCookies.
func cookieParam(u *url.URL, c *http.Cookie) *network.CookieParam {
	p := &network.CookieParam{Name: c.Name, Value: c.Value, URL: u.String(), Domain: c.Domain, Path: c.Path,
		Secure: c.Secure, HTTPOnly: c.HttpOnly}
	if !c.Expires.IsZero() {
		p.Expires = cdp.TimeSinceEpoch(float64(c.Expires.UnixNano()) / 1e9)
	}
	return p
}

// countChainRedirect counts one redirect resolveChain followed (redirect_count).
func (st *renderState) countChainRedirect() {
	st.mu.Lock()
	st.chainRedirects++
	st.mu.Unlock()
}

func (st *renderState) chainRedirectCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.chainRedirects
}

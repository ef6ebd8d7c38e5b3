package render

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"downloader"
)

// RendererKind names the CDP server behind the pool (--renderer-kind). The renderer keeps
// one code path for every kind (SPEC §3); a kind only picks a profile, the differences as
// data (docs/renderers.md has the reading behind each).
type RendererKind string

// The renderer kinds. The zero value detects the kind at connect time.
const (
	RendererAuto     RendererKind = ""
	RendererChromium RendererKind = "chromium"
	RendererObscura  RendererKind = "obscura"
)

// ParseRendererKind reads --renderer-kind: "auto" (or empty), "chromium" or "obscura".
func ParseRendererKind(s string) (RendererKind, error) {
	switch k := RendererKind(strings.ToLower(strings.TrimSpace(s))); k {
	case "auto", RendererAuto:
		return RendererAuto, nil
	case RendererChromium, RendererObscura:
		return k, nil
	}
	return "", downloader.Invalidf("renderer_kind", "render: renderer kind %q is none of auto, chromium, obscura", s)
}

// interceptionMode is how a render decides on the browser's requests before they are sent.
type interceptionMode int

const (
	// interceptFetch pauses requests in the browser (Fetch.enable with resource types):
	// hops admitted before they are sent, speculative loads failed, sub-requests capped,
	// skipped types failed.
	interceptFetch interceptionMode = iota
	// interceptProxy sends no Fetch.enable (Obscura reads only urlPattern and turns the
	// patterns into a block list for scripts and styles, never pausing a document): hop
	// admission and the caps are enforced at our proxy, which sees every request.
	interceptProxy
)

// proxyMode is how the browser is made to send every request through our guard.
type proxyMode int

const (
	// proxyPerContext gives each browser context our proxy (Target.createBrowserContext
	// proxyServer), one per render.
	proxyPerContext proxyMode = iota
	// proxyServerWide relies on the server's own proxy (`obscura serve --proxy`) being our
	// one long-lived guarded proxy: the server ignores a context's proxyServer.
	proxyServerWide
)

// userAgentMode is how our user agent reaches the origin.
type userAgentMode int

const (
	// userAgentEmulation: Emulation.setUserAgentOverride (header, navigator.userAgent,
	// client hints).
	userAgentEmulation userAgentMode = iota
	// userAgentHeader: Network.setUserAgentOverride, which Obscura applies to the header
	// only; `obscura serve --user-agent` sets the same for every page.
	userAgentHeader
)

// profile is what a render does differently on one kind of CDP server. The zero value is
// not a profile; take one from profileFor.
type profile struct {
	kind         RendererKind
	interception interceptionMode
	proxy        proxyMode
	userAgent    userAgentMode
	// connectionPerRender: one websocket per render, kept warm, instead of warm tabs on
	// one connection: Obscura runs one navigation at a time per connection, holds every
	// other command meanwhile ("Server busy" past 256) and suspends the JavaScript of the
	// connection's other pages at each navigation start.
	connectionPerRender bool
	// waitUntil is Page.navigate's waitUntil, for a server that sends its page events in
	// one batch once the navigation ends; empty: wait for the events.
	waitUntil string
	// navigationErrorIsOrigin: a CDP error to Page.navigate is the page's own failure
	// (Obscura's), classified by classifyNavigationError, not renderer_crashed.
	navigationErrorIsOrigin bool
	// contextPerRender: a fresh browser context per render even under wipe isolation,
	// because the server cannot wipe one (Storage.clearDataForOrigin is a no-op,
	// DOMStorage and Browser.resetPermissions are errors on Obscura).
	contextPerRender bool
	// resolveRedirects: the main document's redirect chain is followed by our own admitted
	// requests first (resolveChain) and the server navigates to the final URL only: its
	// redirects go on inside its HTTP client, and an HTTPS hop reaches our proxy as a
	// CONNECT that cannot be told from a sub-request's.
	resolveRedirects bool
}

// profileFor returns the profile of kind; RendererAuto is Chromium's, the one that asks
// least of the guard (the canary still checks it).
func profileFor(kind RendererKind) profile {
	if kind == RendererObscura {
		return profile{
			kind:                    RendererObscura,
			interception:            interceptProxy,
			proxy:                   proxyServerWide,
			userAgent:               userAgentHeader,
			connectionPerRender:     true,
			waitUntil:               "networkidle0",
			navigationErrorIsOrigin: true,
			contextPerRender:        true,
			resolveRedirects:        true,
		}
	}
	return profile{kind: RendererChromium, interception: interceptFetch, proxy: proxyPerContext, userAgent: userAgentEmulation}
}

// browserVersion is the part of a CDP server's /json/version the kind is told from.
type browserVersion struct {
	// Chrome's fields, not ours. naming:external (Chrome's /json/version)
	Browser string `json:"Browser"`
	// naming:external (Chrome's /json/version)
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

// detectKind tells the server from its /json/version. Chromium says HeadlessChrome/…, or
// Chrome/ with a real build number; Obscura answers a fixed document that also says
// Chrome/, but always with build and patch 0 ("Chrome/145.0.0.0") and a websocket path
// of exactly /devtools/browser, with no browser id. Anything else is taken for Chromium.
func detectKind(v browserVersion) RendererKind {
	product, version, _ := strings.Cut(v.Browser, "/")
	if product != "Chrome" || !strings.HasSuffix(version, ".0.0.0") {
		return RendererChromium
	}
	u, err := url.Parse(v.WebSocketDebuggerURL)
	if err != nil || strings.TrimSuffix(u.Path, "/") != "/devtools/browser" {
		return RendererChromium
	}
	return RendererObscura
}

// readVersion fetches endpoint's /json/version (ws:// and http:// endpoints alike, on
// the endpoint's host and port).
func readVersion(ctx context.Context, endpoint string) (browserVersion, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return browserVersion{}, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	scheme := "http"
	if u.Scheme == "wss" || u.Scheme == "https" {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return browserVersion{}, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	versionURL := scheme + "://" + net.JoinHostPort(host, port) + "/json/version"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, versionURL, nil)
	if err != nil {
		return browserVersion{}, err
	}
	client := http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return browserVersion{}, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	defer resp.Body.Close()
	var v browserVersion
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return browserVersion{}, fmt.Errorf("endpoint %q: %s: %w", endpoint, versionURL, err)
	}
	return v, nil
}

// classifyNavigationError is the cause (and so SPEC §4's reason) of a Page.navigate that a
// server answered with a CDP error, as Obscura answers a navigation that failed.
// proxyCause is what our proxy recorded for the page's host, if it saw the request fail
// (the best evidence: it dialled the origin itself); CauseReported when it did not. The
// message is read only when the proxy has no record. A failure that never reached our
// proxy is ours (renderer_unavailable): the server could not even ask for the page.
func classifyNavigationError(message string, proxyCause downloader.Cause) downloader.Cause {
	if proxyCause.IsFailure() {
		return proxyCause
	}
	m := strings.ToLower(message)
	switch {
	case strings.Contains(m, "navigation exceeded"), strings.Contains(m, "deadline"):
		return downloader.CauseRenderTimeout
	case strings.Contains(m, "invalid url"):
		return downloader.CauseInvalidURL
	case strings.Contains(m, "too many redirects"):
		return downloader.CauseHTTPStatus
	case strings.Contains(message, "ERR_"):
		// A Chromium net error name inside the message (net::ERR_…).
		for f := range strings.FieldsFuncSeq(message, func(r rune) bool { return r == ' ' || r == ':' || r == '(' || r == ')' || r == ',' }) {
			if !strings.HasPrefix(f, "ERR_") {
				continue
			}
			c := netErrorCause(f)
			if _, known := netErrors[f]; !known && c == downloader.CauseConnectionReset {
				break // a name we do not know: not evidence of the origin's failure
			}
			if c == downloader.CauseRendererCrashed {
				return downloader.CauseRendererUnavailable // aborted on our side
			}
			return c
		}
	case strings.Contains(m, "certificate"), strings.Contains(m, "tls"), strings.Contains(m, "ssl"):
		return downloader.CauseTLSFailed
	case strings.Contains(m, "connection refused"):
		return downloader.CauseConnectRefused
	case strings.Contains(m, "connection reset"), strings.Contains(m, "connection closed"):
		return downloader.CauseConnectionReset
	case strings.Contains(m, "timed out"):
		return downloader.CauseResponseTimeout
	}
	return downloader.CauseRendererUnavailable
}

package render

import (
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"downloader"
)

// proxyHops admits the main-document hops of a render whose browser is not asked to pause
// requests (interceptProxy: Obscura follows redirects inside its own HTTP client and
// never pauses a document). Our proxy sees every request instead, and a top-level
// document says so (Sec-Fetch-Dest: document, which Obscura sends on each hop it
// follows): the first is the page's, under the caller's admission; each later one gets an
// admission of its own through the render's HopAdmitter before a byte goes to its host, as the pauser
// gives it (hops.go), bounded by the render's soft deadline. A hop not admitted in time
// is refused and ends the render with self_rate_limited (SPEC §2, §4).
//
// Chromium sends no Sec-Fetch headers to a plain http:// origin; there a navigation is
// told by its Accept (isDocumentRequest), which makes a frame's document a hop too, as
// SPEC §3 allows ("admitted like a hop"). A CONNECT carries no header at all, so the main document's redirects are resolved
// before the browser navigates (resolveChain), each hop admitted there; a page's own
// HTTPS navigation to another host still goes under the render's sub-request caps
// (docs/renderers.md). Safe for concurrent use.
type proxyHops struct {
	r   *hopRender
	log *slog.Logger

	mu        sync.Mutex
	firstSeen bool
	expected  *url.URL // the chain's final URL, whose next document request its hop covers
}

// admit decides on a top-level document request of the render; false: refuse it.
func (h *proxyHops) admit(r *http.Request) bool {
	if h.takeExpected(r.URL) {
		return true
	}
	domain, err := downloader.CanonicalHost(r.URL.Host)
	if err != nil {
		return false
	}
	return h.admitDomain(domain)
}

// expect makes the next document request for u (the final URL of the chain resolveChain
// followed, Obscura's navigation) go under the admission of the chain's last hop, as a
// browser's request that followed the redirect itself would.
func (h *proxyHops) expect(u *url.URL) {
	h.mu.Lock()
	h.expected = u
	h.mu.Unlock()
}

func (h *proxyHops) takeExpected(u *url.URL) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.expected
	if e == nil || !strings.EqualFold(e.Host, u.Host) || e.RequestURI() != u.RequestURI() {
		return false
	}
	h.expected = nil
	return true
}

// admitDomain admits one main document request to domain: the render's first under the
// caller's admission, each later one with an admission of its own; false: refuse it.
func (h *proxyHops) admitDomain(domain string) bool {
	h.mu.Lock()
	first := !h.firstSeen
	h.firstSeen = true
	h.mu.Unlock()
	if first || h.r.st.coveredByFirst(domain) {
		return true
	}
	adm, err := h.r.hops.AdmitHop(withDeadline(h.r.ctx, h.r.soft), domain)
	if err != nil {
		if h.r.ctx.Err() == nil {
			h.log.Info("render: main document hop not admitted in time", "domain", domain, "error", err)
			h.r.st.refuseHop()
			h.r.refuse()
		}
		return false
	}
	return h.r.st.addHop(domain, adm) // false: the render ended meanwhile, adm given back
}

// setProxyHops makes the render's proxy admit its hops (nil: none is admitted there).
func (st *renderState) setProxyHops(h *proxyHops) {
	st.mu.Lock()
	st.atProxy = h
	st.mu.Unlock()
}

func (st *renderState) proxyHops() *proxyHops {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.atProxy
}

// isDocumentRequest tells a navigation's request from a sub-request by the browser's fetch
// metadata, or, where there is none (plain http:// on Chromium), by an Accept that asks
// for HTML first, as browsers send for documents only.
func isDocumentRequest(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Dest") {
	case "document":
		return true
	case "":
		return strings.HasPrefix(r.Header.Get("Accept"), "text/html")
	}
	return false
}

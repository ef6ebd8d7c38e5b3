package render

import (
	"net/http"
	"strings"

	"github.com/chromedp/cdproto/network"
)

// On a server with no Fetch.enable (interceptProxy), the resource types a render skips
// (skip_resource_types, SPEC §3) are refused at our proxy before anything is dialled,
// told by the request's fetch metadata: Obscura sends Sec-Fetch-Dest on every request,
// plain http:// included (obscura-net ResourceRequest::destination). Without it
// (Chromium to a plain http:// origin) only the Accept of images and stylesheets tells
// their type. Inside a CONNECT tunnel (HTTPS) nothing can be told: those requests go out
// and are not counted skipped (docs/renderers.md).

// requestResourceType is the resource type of a plain-HTTP request, as far as its
// headers tell it; false: not told (fetch() and XHR share "empty").
func requestResourceType(r *http.Request) (network.ResourceType, bool) {
	switch r.Header.Get("Sec-Fetch-Dest") {
	case "image":
		return network.ResourceTypeImage, true
	case "font":
		return network.ResourceTypeFont, true
	case "audio", "video":
		return network.ResourceTypeMedia, true
	case "track":
		return network.ResourceTypeTextTrack, true
	case "style":
		return network.ResourceTypeStylesheet, true
	case "script":
		return network.ResourceTypeScript, true
	case "manifest":
		return network.ResourceTypeManifest, true
	case "":
		accept := r.Header.Get("Accept")
		switch {
		case strings.HasPrefix(accept, "image/"):
			return network.ResourceTypeImage, true
		case strings.HasPrefix(accept, "text/css"):
			return network.ResourceTypeStylesheet, true
		}
	}
	return "", false
}

// skipAtProxy makes the render's proxy refuse requests of the types of set
// (interceptProxy).
func (st *renderState) skipAtProxy(set skipSet) {
	st.mu.Lock()
	st.proxySkip = set
	st.mu.Unlock()
}

// skipsRequest reports whether r is of a type the render skips at the proxy, and counts
// it skipped: it is answered by us and never sent.
func (st *renderState) skipsRequest(r *http.Request) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.proxySkip) == 0 {
		return false
	}
	t, ok := requestResourceType(r)
	if !ok || !st.proxySkip.has(t) {
		return false
	}
	st.proxySkipped++
	return true
}

func (st *renderState) proxySkippedCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.proxySkipped
}

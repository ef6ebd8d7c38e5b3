package render

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"downloader"
)

// assetHandlers serve assets.html and its assets: a stylesheet, a script (which writes
// the page's text), a web font, images (an <img>, a <picture> and a CSS background),
// video and audio.
func assetHandlers() map[string]http.HandlerFunc {
	h := map[string]http.HandlerFunc{"/": serveFile("assets.html", "text/html; charset=utf-8")}
	body := func(contentType, s string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			w.Write([]byte(s))
		}
	}
	h["/asset/style.css"] = body("text/css", "p { color: #333 }")
	h["/asset/app.js"] = body("text/javascript", `document.addEventListener("DOMContentLoaded", () => { document.getElementById("out").textContent = "The script ran."; });`)
	for _, p := range []string{"/asset/font.woff2", "/asset/banner.png", "/asset/photo.jpg", "/asset/photo.webp", "/asset/fallback.jpg", "/asset/clip.mp4", "/asset/sound.mp3"} {
		h[p] = body("application/octet-stream", strings.Repeat("x", 64))
	}
	return h
}

// isSkippedAsset is an asset of a type skipped by default (image, media, font).
func isSkippedAsset(_, path string) bool {
	return strings.HasPrefix(path, "/asset/") && !strings.HasSuffix(path, ".css") && !strings.HasSuffix(path, ".js")
}

// TestRenderSkipsResourceTypes: by default a render makes no image, media or font request
// (the origin never sees one), counts them in skipped_request_count apart from
// subrequest_count, capped_subrequest_count and blocked_request_count, and still loads the
// page's stylesheet and script; an empty skip list loads everything. With a pauser (the
// service: every request paused) skipping is its decision; without one, the tab pauses
// only the skipped types. With a pauser, a first pool's total cap of 2 sub-requests
// leaves room for exactly the stylesheet and the script: a skipped request counted as a
// sub-request would take it. (Without a pauser the proxy counts, and on plain HTTP it
// cannot tell the main document from a sub-request: no cap there.)
func TestRenderSkipsResourceTypes(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	for _, hops := range []bool{true, false} {
		t.Run(fmt.Sprintf("hops=%v", hops), func(t *testing.T) { testRenderSkips(t, hops) })
	}
}

func testRenderSkips(t *testing.T, hops bool) {
	o := newSiteOrigin(t, assetHandlers())
	first := Config{}
	if hops {
		first.MaxSubrequestCount = 2
	}
	p := o.poolHops(t, first, hops)
	f := getFixture(t)

	mark := o.mark()
	out := p.Render(context.Background(), f.url(siteName(1)+"/"), nil, safetyTimeout(t))
	checkCause(t, out)
	if out.FailReason != "" || !strings.Contains(out.Text, "The script ran.") {
		t.Fatalf("fail_reason=%s text %q, want the page rendered with its script", failReason(out), out.Text)
	}
	if got := o.requests(mark, isSkippedAsset); len(got) != 0 {
		var paths []string
		for _, r := range got {
			paths = append(paths, r.URL.Path)
		}
		t.Errorf("skipped types reached the origin: %v", paths)
	}
	for _, path := range []string{"/asset/style.css", "/asset/app.js"} {
		if got := o.requests(mark, func(_, p string) bool { return p == path }); len(got) != 1 {
			t.Errorf("%s reached the origin %d times, want 1", path, len(got))
		}
	}
	hs := out.HealthSignal
	// At least the <img>, the <picture>'s image and the video: the background image, the
	// font and the audio depend on the browser's choices.
	if n := deref(hs.SkippedRequestCount); n < 3 {
		t.Errorf("skipped_request_count=%d, want >= 3", n)
	}
	if deref(hs.BlockedRequestCount) != 0 || deref(hs.SubrequestCount) != 2 || deref(hs.SubrequestFailedCount) != 0 || deref(hs.CappedSubrequestCount) != 0 {
		t.Errorf("blocked_request_count=%d subrequest_count=%d subrequest_failed_count=%d capped_subrequest_count=%d, want 0, 2 (css, js), 0, 0",
			deref(hs.BlockedRequestCount), deref(hs.SubrequestCount), deref(hs.SubrequestFailedCount), deref(hs.CappedSubrequestCount))
	}

	if hops {
		p.Close()
		p = o.poolHops(t, Config{}, hops)
	}

	// An empty list skips nothing; the same tab switches per render.
	mark = o.mark()
	out = p.RenderWith(context.Background(), f.url(siteName(2)+"/"), nil, downloader.RenderOptions{Timeout: safetyTimeout(t), SkipResourceTypes: []downloader.ResourceType{}})
	if out.FailReason != "" {
		t.Fatalf("fail_reason=%s", failReason(out))
	}
	var paths []string
	for _, r := range o.requests(mark, isSkippedAsset) {
		paths = append(paths, r.URL.Path)
	}
	for _, want := range []string{"/asset/photo.jpg", "/asset/clip.mp4", "/asset/banner.png"} {
		if !slices.Contains(paths, want) {
			t.Errorf("with nothing skipped, %s never reached the origin (got %v)", want, paths)
		}
	}
	if n := deref(out.HealthSignal.SkippedRequestCount); n != 0 {
		t.Errorf("skipped_request_count=%d with nothing skipped", n)
	}

	// Skipping scripts too: the page renders without its script's text.
	mark = o.mark()
	out = p.RenderWith(context.Background(), f.url(siteName(3)+"/"), nil, downloader.RenderOptions{Timeout: safetyTimeout(t),
		SkipResourceTypes: []downloader.ResourceType{downloader.ResourceScript, downloader.ResourceImage}})
	if out.FailReason != "" || strings.Contains(out.Text, "The script ran.") {
		t.Errorf("fail_reason=%s text %q, want the page without its script", failReason(out), out.Text)
	}
	if got := o.requests(mark, func(_, p string) bool { return p == "/asset/app.js" || strings.HasSuffix(p, ".jpg") }); len(got) != 0 {
		t.Errorf("a skipped script or image reached the origin: %d requests", len(got))
	}
	if got := o.requests(mark, func(_, p string) bool { return p == "/asset/clip.mp4" }); len(got) == 0 {
		t.Errorf("media was not skipped this time but never reached the origin")
	}
}

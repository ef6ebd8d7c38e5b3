package render

import (
	"context"
	"net/http"
	"testing"

	"github.com/chromedp/cdproto/network"

	"downloader"
)

func skipPages(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/":
		htmlPage(w, `<link rel="stylesheet" href="/s.css"><p>Text with pictures.</p>
<img src="/a.png"><img src="/b.png"><img src="https://media.example.com/tls.png">
<script src="/app.js"></script>`)
	case "/s.css":
		w.Header().Set("Content-Type", "text/css")
		w.Write([]byte("p { color: black; }"))
	case "/app.js":
		w.Header().Set("Content-Type", "text/javascript")
		w.Write([]byte(`document.title = "ran";`))
	default:
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("not really a png"))
	}
}

// TestObscuraSkipsAtProxy: on Obscura's profile (no Fetch.enable) the skipped types are
// refused at our proxy: over plain HTTP the images and the stylesheet never reach the
// origin and skipped_request_count counts exactly them; the script goes out. An image
// over HTTPS is inside a tunnel: it goes out and is not counted skipped.
func TestObscuraSkipsAtProxy(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	o := newExampleOrigin(t, skipPages)
	p, relay := newExamplePool(t, o, nil)
	out := p.RenderWith(context.Background(), getFixture(t).url("http://media.example.com/"), nil, downloader.RenderOptions{
		Timeout: safetyTimeout(t), SkipResourceTypes: []downloader.ResourceType{downloader.ResourceImage, downloader.ResourceStylesheet}})
	if out.FailReason != "" {
		t.Fatalf("fail_reason=%s", failReason(out))
	}
	seen := map[string]int{}
	for _, r := range o.requests("media.example.com") {
		key := r.path
		if r.isTLS {
			key = "tls " + r.path
		}
		seen[key]++
	}
	for _, path := range []string{"/a.png", "/b.png", "/s.css"} {
		if seen[path] != 0 {
			t.Errorf("%s (a skipped type) reached the origin %d times", path, seen[path])
		}
	}
	if seen["/app.js"] != 1 {
		t.Errorf("/app.js reached the origin %d times, want once: scripts are not skipped", seen["/app.js"])
	}
	if seen["tls /tls.png"] != 1 {
		t.Errorf("the HTTPS image reached the origin %d times, want once (a tunnel: not told apart)", seen["tls /tls.png"])
	}
	if n := deref(out.HealthSignal.SkippedRequestCount); n != 3 {
		t.Errorf("skipped_request_count=%d, want 3 (two images and the stylesheet over plain HTTP)", n)
	}
	if n := relay.fetchEnableCount.Load(); n != 0 {
		t.Errorf("fetch_enable_count=%d, want 0 on Obscura's profile", n)
	}
}

// TestRequestResourceType: the types told from a request's headers, as Obscura sends them
// (Sec-Fetch-Dest on every request) and as Chromium sends them to a plain http:// origin
// (no fetch metadata: the Accept alone).
func TestRequestResourceType(t *testing.T) {
	tests := []struct {
		dest, accept string
		want         network.ResourceType
		isTold       bool
	}{
		{"image", "image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8", network.ResourceTypeImage, true},
		{"font", "*/*", network.ResourceTypeFont, true},
		{"video", "*/*", network.ResourceTypeMedia, true},
		{"audio", "*/*", network.ResourceTypeMedia, true},
		{"style", "text/css,*/*;q=0.1", network.ResourceTypeStylesheet, true},
		{"script", "*/*", network.ResourceTypeScript, true},
		{"empty", "*/*", "", false}, // fetch() and XHR alike
		{"document", "text/html", "", false},
		{"", "image/avif,image/webp,*/*;q=0.8", network.ResourceTypeImage, true},
		{"", "text/css,*/*;q=0.1", network.ResourceTypeStylesheet, true},
		{"", "*/*", "", false}, // a font, a script or an XHR from Chromium over http://
	}
	for _, tt := range tests {
		r, _ := http.NewRequest(http.MethodGet, "http://x.test/", nil)
		if tt.dest != "" {
			r.Header.Set("Sec-Fetch-Dest", tt.dest)
		}
		r.Header.Set("Accept", tt.accept)
		got, ok := requestResourceType(r)
		if got != tt.want || ok != tt.isTold {
			t.Errorf("dest %q accept %q: %q %v, want %q %v", tt.dest, tt.accept, got, ok, tt.want, tt.isTold)
		}
	}
}

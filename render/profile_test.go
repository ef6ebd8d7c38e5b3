package render

import (
	"context"
	"testing"
	"time"

	"downloader"
)

func TestParseRendererKind(t *testing.T) {
	tests := []struct {
		in      string
		want    RendererKind
		wantErr bool
	}{
		{"", RendererAuto, false},
		{"auto", RendererAuto, false},
		{"chromium", RendererChromium, false},
		{" Obscura ", RendererObscura, false},
		{"firefox", "", true},
	}
	for _, tt := range tests {
		got, err := ParseRendererKind(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseRendererKind(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil {
			if f := downloader.ErrorField(err); f != "renderer_kind" {
				t.Errorf("ParseRendererKind(%q): field %q, want renderer_kind", tt.in, f)
			}
		}
	}
}

func TestDetectKind(t *testing.T) {
	tests := []struct {
		name string
		v    browserVersion
		want RendererKind
	}{
		{"headless shell", browserVersion{"HeadlessChrome/144.0.7559.96", "ws://127.0.0.1:9222/devtools/browser/6f1c"}, RendererChromium},
		{"headed chrome", browserVersion{"Chrome/145.0.7632.45", "ws://127.0.0.1:9222/devtools/browser/6f1c"}, RendererChromium},
		{"obscura", browserVersion{"Chrome/145.0.0.0", "ws://127.0.0.1:9222/devtools/browser"}, RendererObscura},
		{"obscura, other port", browserVersion{"Chrome/145.0.0.0", "ws://127.0.0.1:9333/devtools/browser/"}, RendererObscura},
		// A Chrome built from a tree with no build number still names its browser id.
		{"chrome x.0.0.0 with an id", browserVersion{"Chrome/145.0.0.0", "ws://127.0.0.1:9222/devtools/browser/6f1c"}, RendererChromium},
		{"empty", browserVersion{}, RendererChromium},
	}
	for _, tt := range tests {
		if got := detectKind(tt.v); got != tt.want {
			t.Errorf("%s: detectKind(%+v) = %q, want %q", tt.name, tt.v, got, tt.want)
		}
	}
}

// TestRendererKindDetect reads /json/version from a real Chromium and from the relay
// (which answers Obscura's document) and tells them apart.
func TestRendererKindDetect(t *testing.T) {
	ws := startRemoteBrowser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := readVersion(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Chromium: %+v", v)
	if got := detectKind(v); got != RendererChromium {
		t.Errorf("Chromium's /json/version %+v detected as %q", v, got)
	}
	relay := newObscuraRelay(t, ws)
	for _, endpoint := range []string{relay.url(), relay.httpURL()} {
		v, err := readVersion(ctx, endpoint)
		if err != nil {
			t.Fatal(err)
		}
		if got := detectKind(v); got != RendererObscura {
			t.Errorf("%s: /json/version %+v detected as %q, want obscura", endpoint, v, got)
		}
	}
}

func TestProfileFor(t *testing.T) {
	c, o := profileFor(RendererChromium), profileFor(RendererObscura)
	if c.interception != interceptFetch || c.proxy != proxyPerContext || c.connectionPerRender || c.waitUntil != "" {
		t.Errorf("chromium profile %+v", c)
	}
	if o.interception != interceptProxy || o.proxy != proxyServerWide || o.userAgent != userAgentHeader ||
		!o.connectionPerRender || o.waitUntil == "" || !o.navigationErrorIsOrigin || !o.contextPerRender {
		t.Errorf("obscura profile %+v", o)
	}
	if a := profileFor(RendererAuto); a != c {
		t.Errorf("auto profile %+v, want chromium's", a)
	}
}

func TestClassifyNavigationError(t *testing.T) {
	tests := []struct {
		msg   string
		proxy downloader.Cause
		want  downloader.FailReason
	}{
		// Our proxy saw the origin fail: that is the answer, whatever the message says.
		{"Network error: Network error: http://a.test/: error sending request", downloader.CauseConnectRefused, downloader.FailConnectRefused},
		{"Network error: http://a.test/: net::ERR_TUNNEL_CONNECTION_FAILED", downloader.CauseDomainNotFound, downloader.FailDomainNotFound},
		// No record at our proxy: a tunnel failure is ours.
		{"Network error: http://a.test/: net::ERR_TUNNEL_CONNECTION_FAILED", downloader.CauseReported, downloader.FailRendererUnavailable},
		{"Network error: http://a.test/: net::ERR_CONNECTION_REFUSED", downloader.CauseReported, downloader.FailConnectRefused},
		{"Network error: https://a.test/: net::ERR_CERT_AUTHORITY_INVALID", downloader.CauseReported, downloader.FailTLSFailed},
		{"Network error: http://a.test/: net::ERR_ABORTED", downloader.CauseReported, downloader.FailRendererUnavailable},
		{"Network error: navigation exceeded 30000ms deadline", downloader.CauseReported, downloader.FailRenderTimeout},
		{"Invalid URL: relative URL without a base", downloader.CauseReported, downloader.FailInvalidTask},
		{"Too many redirects (limit 20)", downloader.CauseReported, downloader.FailHTTPStatusError},
		{"Network error: error sending request: invalid peer certificate: UnknownIssuer", downloader.CauseReported, downloader.FailTLSFailed},
		{"Network error: tcp connect error: Connection refused (os error 111)", downloader.CauseReported, downloader.FailConnectRefused},
		{"Network error: connection reset by peer", downloader.CauseReported, downloader.FailConnectionReset},
		{"Network error: operation timed out", downloader.CauseReported, downloader.FailResponseTimeout},
		{"Server busy: navigation in progress, try again later", downloader.CauseReported, downloader.FailRendererUnavailable},
		{"something new", downloader.CauseReported, downloader.FailRendererUnavailable},
	}
	for _, tt := range tests {
		got := classifyNavigationError(tt.msg, tt.proxy).FailReason()
		if got != tt.want {
			t.Errorf("classifyNavigationError(%q, %q) = %s, want %s", tt.msg, tt.proxy, got, tt.want)
		}
		if got == downloader.FailRendererCrashed {
			t.Errorf("classifyNavigationError(%q): renderer_crashed, never for a navigation error", tt.msg)
		}
	}
}

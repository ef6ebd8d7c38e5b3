package render

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"downloader"
)

// TestProfileCallsOnRelay: with Obscura's profile on the relay, our user agent reaches the
// origin (by the header, where Emulation's override is a no-op), Page.navigate with
// waitUntil answers once the page has loaded, and a failed navigation is a CDP error
// classified as the page's failure, never renderer_crashed. With Chromium's profile on
// the same relay the user agent is lost: the profile is what makes the difference.
func TestProfileCallsOnRelay(t *testing.T) {
	t.Parallel() // owns its fixture and browser (parallelTests)
	ownFixture(t)
	s := newRelaySetup(t)
	p := &Pool{cfg: poolConfig{Config: Config{UserAgent: testUserAgent}}}
	for _, tt := range []struct {
		kind    RendererKind
		isOurUA bool
	}{{RendererObscura, true}, {RendererChromium, false}} {
		prof := profileFor(tt.kind)
		ctx := s.tab(t, "")
		tg := chromedp.FromContext(ctx).Target
		if err := p.setUserAgent(ctx, tg, prof); err != nil {
			t.Fatalf("%s: set user agent: %v", tt.kind, err)
		}
		nav, err := navigate(ctx, tg, prof, "http://js.test/relay/ua")
		if err != nil || nav.ErrorText != "" {
			t.Fatalf("%s: navigate: %v %q", tt.kind, err, nav.ErrorText)
		}
		// The relay answers Page.navigate only after the page loaded: its text is there.
		text := bodyText(t, ctx)
		if got := strings.Contains(text, testUserAgent); got != tt.isOurUA {
			t.Errorf("%s profile: the origin saw %q; our user agent there = %v, want %v", tt.kind, text, got, tt.isOurUA)
		}
	}
	ctx := s.tab(t, "")
	_, err := navigate(ctx, chromedp.FromContext(ctx).Target, profileFor(RendererObscura), "https://refused.test/")
	msg, ok := navigationCDPError(err)
	if !ok {
		t.Fatalf("failed navigation: err %v, want a CDP error", err)
	}
	if r := classifyNavigationError(msg, downloader.CauseReported).FailReason(); r == downloader.FailRendererCrashed || r == "" {
		t.Errorf("classified %q as %q", msg, r)
	}
}

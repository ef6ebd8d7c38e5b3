package chromium

import "github.com/chromedp/chromedp"

// Flags are the local browser's flags, without the proxy: headless, and everything that
// would make the browser talk to Google's hosts by itself turned off.
func Flags(binaryPath, userAgent string) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(binaryPath),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Headless,
		chromedp.NoSandbox, // we run as root
		chromedp.DisableGPU,
		chromedp.UserAgent(userAgent),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-client-side-phishing-detection", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("safebrowsing-disable-auto-update", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("dns-prefetch-disable", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-hang-monitor", true),
		// A crawler has no use for a window the page opens (window.open, target=_blank
		// links and forms), and its document would load another site behind that site's
		// limiter (SPEC §3): refuse them all. window.open returns null.
		chromedp.Flag("block-new-web-contents", true),
		chromedp.Flag("disable-prompt-on-repost", true),
		chromedp.Flag("disable-ipc-flooding-protection", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("hide-scrollbars", true),
		// One process per render's context is isolation enough; keeping cross-site frames
		// in the page's process saves a process per iframe and lets us see their requests.
		// Speculative loads (prerender, no-state prefetch; DNS prefetch above) would reach
		// other sites behind their limiter (SPEC §3); a link prefetch is failed by the
		// pauser. The back-forward cache would freeze every page a tab leaves, for a back
		// a crawler never makes, and the wipe would then evict it: off, a page is torn down
		// once.
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,InterestFeedContentSuggestions,CalculateNativeWinOcclusion,AutofillServerCommunication,CertificateTransparencyComponentUpdater,IsolateOrigins,site-per-process,Prerender2,NoStatePrefetch,BackForwardCache"),
		chromedp.Flag("disable-site-isolation-trials", true),
		// A shared worker's requests are in no tab's Fetch domain: its HTTPS ones could
		// ride an admitted tunnel uncounted (SPEC §3: every connection a render opens
		// counts). A text crawl does without it, as Chrome on Android long did; pages
		// feature-test for it. Dedicated workers stay: the tab's pauser sees theirs.
		chromedp.Flag("disable-blink-features", "SharedWorker"),
		// WebRTC could reach addresses without the proxy.
		chromedp.Flag("force-webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		chromedp.Flag("webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		chromedp.WindowSize(1280, 1024),
	}
}

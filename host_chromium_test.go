package downloader_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"downloader"
)

// chromiumPath is Debian's headless shell, the browser the renderer drives.
const chromiumPath = "/usr/lib/chromium/chromium-headless-shell"

// differentialSpellingCount is how many generated host spellings the differential test
// sends to the browser in its one evaluate call.
const differentialSpellingCount = 6000

// TestCanonicalHostAgreesWithChromium is the differential test of SPEC §2's one host
// parser: thousands of generated and mutated host spellings are canonicalised by
// CanonicalHost and by the headless shell's own URL parser (new URL(u).hostname, one
// page, one evaluate), and the two must agree on every input both accept. Chromium keeps
// a trailing dot and brackets an IPv6 host; the key drops both (documented in
// CanonicalHost), so they are taken off Chromium's answer before comparing. Where only
// one side accepts, the counts and a few examples are logged.
func TestCanonicalHostAgreesWithChromium(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium-headless-shell is missing at %s (scripts/setup.sh installs it): %v", chromiumPath, err)
		}
		t.Skipf("chromium-headless-shell is not installed at %s (scripts/setup.sh installs it)", chromiumPath)
	}
	spellings := newSpellingGenerator(20261202).spellings(differentialSpellingCount)
	spellings = append(spellings, fixedSpellings()...)
	urls := make([]string, len(spellings))
	for i, s := range spellings {
		urls[i] = s.url
	}
	hostnames := chromiumHostnames(t, urls)
	if len(hostnames) != len(urls) {
		t.Fatalf("the browser answered %d hostnames for %d URLs", len(hostnames), len(urls))
	}
	var both, onlyOurs, onlyBrowser, neither int
	var onlyOursEx, onlyBrowserEx []string
	for i, s := range spellings {
		ours, err := downloader.CanonicalHost(s.host)
		theirs := hostnames[i]
		switch {
		case err == nil && theirs != nil:
			both++
			want := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(*theirs, "["), "]"), ".")
			if ours != want {
				t.Errorf("host %q (URL %q): CanonicalHost = %q, Chromium's hostname = %q", s.host, s.url, ours, *theirs)
			}
			// The URL the service passes on carries that host too (credentials aside,
			// which the service refuses).
			if u, d, perr := downloader.ParseTargetURL("url", s.url); perr == nil {
				if d != ours || u.Hostname() != ours {
					t.Errorf("URL %q: ParseTargetURL gives %q (URL host %q), CanonicalHost %q", s.url, d, u.Hostname(), ours)
				}
			} else if !strings.Contains(s.url, "@") {
				t.Errorf("URL %q: the host is accepted but ParseTargetURL refuses it: %v", s.url, perr)
			}
		case err == nil:
			onlyOurs++
			if len(onlyOursEx) < 12 {
				onlyOursEx = append(onlyOursEx, s.host+" → "+ours)
			}
		case theirs != nil:
			onlyBrowser++
			if len(onlyBrowserEx) < 12 {
				onlyBrowserEx = append(onlyBrowserEx, s.host+" → "+*theirs)
			}
		default:
			neither++
		}
	}
	t.Logf("%d spellings: both accept %d, only CanonicalHost %d, only Chromium %d, neither %d", len(spellings), both, onlyOurs, onlyBrowser, neither)
	if len(onlyOursEx) > 0 {
		t.Logf("accepted by CanonicalHost only (%d): %q", onlyOurs, onlyOursEx)
	}
	if len(onlyBrowserEx) > 0 {
		t.Logf("accepted by Chromium only (%d): %q", onlyBrowser, onlyBrowserEx)
	}
	if both < len(spellings)/3 {
		t.Errorf("only %d of %d spellings were accepted by both: the generator tests too little", both, len(spellings))
	}
}

// fixedSpellings are the cases the issue named, always in the batch.
func fixedSpellings() []hostSpelling {
	var out []hostSpelling
	for _, h := range []string{"11.22.33.44", "0x0b16212c", "185999660", "013.026.041.054", "11.22.8492", "11.1450284",
		"0xb.0x16.0x21.0x2c", "ｓｉｔｅ.test", "BÜCHER.test", "a。b．c｡test", "%41.test", "[::FFFF:1.2.3.4]",
		"faß.de", "xn--zz.test", "example.com.", "1.2.3.4.5", "[::1%25eth0]"} {
		out = append(out, hostSpelling{host: h, url: "http://" + h + "/"})
	}
	return out
}

// chromiumHostnames runs new URL(u).hostname over urls in one page of the headless shell,
// in one evaluate call: null where the browser refuses the URL.
func chromiumHostnames(t *testing.T, urls []string) []*string {
	t.Helper()
	dir := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(dir),
	}
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer allocCancel()
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(func(string, ...any) {}))
	defer cancel()
	ctx, timeout := context.WithTimeout(ctx, 2*time.Minute)
	defer timeout()
	in, err := json.Marshal(urls)
	if err != nil {
		t.Fatal(err)
	}
	js := `(() => { const out = []; for (const u of ` + string(in) + `) {
		try { out.push(new URL(u).hostname); } catch (e) { out.push(null); } } return out; })()`
	// A fresh tab shows about:blank: a local page, no navigation needed.
	res, err := chromedp.Run(ctx, chromedp.Evaluate[[]*string](js))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the browser did not answer in time: %v", err)
		}
		t.Fatalf("evaluate in the browser: %v", err)
	}
	return res
}

package render

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"downloader"
	"downloader/limiter"
	"downloader/render/renderproxy"
)

// newTLSExamplePool is newExamplePool with the guard proxy terminating TLS under a CA in a
// directory of the test. With isTrusted the relay's Chromium trusts that CA (by its key:
// --ignore-certificate-errors-spki-list, as Obscura is told by SSL_CERT_FILE), and
// nothing else: the origin's own test certificate would be refused by it.
func newTLSExamplePool(t *testing.T, o *exampleOrigin, isTrusted bool, edit func(*Config)) (hopsPool, *obscuraRelay, *renderproxy.Authority) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "render-guard-ca")
	ca, err := renderproxy.LoadOrCreateAuthority(dir) // made before the browser: it must know the key
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	if isTrusted {
		flags = append(flags, "--ignore-certificate-errors-spki-list="+spkiHash(ca.Certificate()))
	}
	p, relay := newExamplePoolFlags(t, o, flags, func(c *Config) {
		c.GuardProxyCADir = dir
		if edit != nil {
			edit(c)
		}
	})
	return p, relay, ca
}

// spkiHash is a certificate's key as Chromium's --ignore-certificate-errors-spki-list
// takes it: base64 of the SHA-256 of its SubjectPublicKeyInfo.
func spkiHash(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// TestObscuraTLSSelfNavigationAdmitted: with TLS terminated at our guard proxy, a page
// that sends itself to another host over HTTPS (location.href) is seen as the document
// request it is, and admitted as a hop before a byte goes to that host. Counted at the
// origin: hopb's request arrived after an admission of hopb, and exactly one was asked.
func TestObscuraTLSSelfNavigationAdmitted(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	o := newExampleOrigin(t, chainPages)
	p, _, _ := newTLSExamplePool(t, o, true, nil)
	before := o.admittedCount("hopb.example.com")
	out := p.Render(context.Background(), getFixture(t).url("https://selfnav.example.com/"), nil, safetyTimeout(t))
	checkCause(t, out)
	if out.FailReason != "" {
		t.Fatalf("fail_reason=%s", failReason(out))
	}
	away := 0
	for _, r := range o.requests("hopb.example.com") {
		if r.path == "/away" {
			away++
			if !r.isTLS {
				t.Errorf("hopb/away came over plain HTTP")
			}
			if r.admittedCount == 0 {
				t.Errorf("hopb/away reached its origin before an admission of hopb")
			}
		}
	}
	if away != 1 {
		t.Errorf("hopb/away requested %d times, want once", away)
	}
	if got := o.admittedCount("hopb.example.com") - before; got != 1 {
		t.Errorf("hopb admitted %d times, want once (the page's own navigation, a hop)", got)
	}
	for _, r := range o.requests("selfnav.example.com") {
		if !r.isTLS {
			t.Errorf("selfnav%s came over plain HTTP", r.path)
		}
	}
	getFixture(t).noViolations(t)
}

// TestObscuraTLSSelfNavigationRefused: a hop our limiter does not admit in time is never
// sent: the render ends with self_rate_limited, as on Chromium (SPEC §4), and hopb's
// origin sees nothing.
func TestObscuraTLSSelfNavigationRefused(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	o := newExampleOrigin(t, chainPages)
	p, _, _ := newTLSExamplePool(t, o, true, nil)
	p.hops = refusingHops{} // the render's admitter, passed with the call, refuses
	out := p.Render(context.Background(), getFixture(t).url("https://selfnav.example.com/"), nil, safetyTimeout(t))
	checkCause(t, out)
	if out.FailReason != downloader.FailSelfRateLimited || out.Summary("selfnav.example.com").HasReachedOrigin {
		t.Errorf("fail_reason=%s, want self_rate_limited with has_reached_origin=false", failReason(out))
	}
	if got := len(o.requests("hopb.example.com")); got != 0 {
		t.Errorf("hopb's origin saw %d requests of a hop never admitted", got)
	}
}

// TestObscuraTLSSkipsAtProxy: with TLS terminated, the skipped types of an HTTPS page
// are refused at our proxy by their fetch metadata, before anything is dialled: none
// reaches the origin, skipped_request_count counts exactly them, the script goes out.
func TestObscuraTLSSkipsAtProxy(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	o := newExampleOrigin(t, skipPages)
	p, _, _ := newTLSExamplePool(t, o, true, nil)
	out := p.RenderWith(context.Background(), getFixture(t).url("https://media.example.com/"), nil, downloader.RenderOptions{
		Timeout: safetyTimeout(t), SkipResourceTypes: []downloader.ResourceType{downloader.ResourceImage, downloader.ResourceStylesheet}})
	if out.FailReason != "" {
		t.Fatalf("fail_reason=%s", failReason(out))
	}
	seen := map[string]int{}
	for _, r := range o.requests("media.example.com") {
		if !r.isTLS {
			t.Errorf("%s came over plain HTTP", r.path)
		}
		seen[r.path]++
	}
	for _, path := range []string{"/a.png", "/b.png", "/tls.png", "/s.css"} {
		if seen[path] != 0 {
			t.Errorf("%s (a skipped type, over HTTPS) reached the origin %d times", path, seen[path])
		}
	}
	if seen["/app.js"] != 1 {
		t.Errorf("/app.js reached the origin %d times, want once: scripts are not skipped", seen["/app.js"])
	}
	if n := deref(out.HealthSignal.SkippedRequestCount); n != 4 {
		t.Errorf("skipped_request_count=%d, want 4 (three images and the stylesheet)", n)
	}
}

// TestObscuraTLSCapsExact: with TLS terminated the caps count requests, not tunnels: of
// 3 hosts × 8 HTTPS fetches under caps of 2 per host and 5 in all, exactly 5 requests
// reach the other hosts (counted at the origins, none over 2), and the other 19 are
// capped.
func TestObscuraTLSCapsExact(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	const perHost, total = 2, 5
	o := newExampleOrigin(t, tunnelPages)
	p, _, _ := newTLSExamplePool(t, o, true, func(c *Config) {
		c.MaxHostSubrequestCount = perHost
		c.MaxSubrequestCount = total
	})
	out := p.Render(context.Background(), getFixture(t).url("https://start.example.com/tunnels"), nil, safetyTimeout(t))
	checkCause(t, out)
	if out.FailReason != "" || out.HTTPStatus != 200 {
		t.Fatalf("fail_reason=%s http_status=%d", failReason(out), out.HTTPStatus)
	}
	reqs := 0
	for _, h := range []string{"cdn1", "cdn2", "cdn3"} {
		n := len(o.requests(h + ".example.com"))
		if n > perHost {
			t.Errorf("%s: %d requests reached the origin, over the per-host cap %d", h, n, perHost)
		}
		reqs += n
	}
	if reqs != total {
		t.Errorf("%d requests reached the other hosts, want exactly the render's cap %d", reqs, total)
	}
	if capped := deref(out.HealthSignal.CappedSubrequestCount); capped != 3*tunnelBurst-total {
		t.Errorf("capped_subrequest_count=%d, want %d", capped, 3*tunnelBurst-total)
	}
	getFixture(t).noViolations(t)
}

// TestObscuraTLSCanaryRefusesUntrusted: a server that does not trust our CA cannot make
// an HTTPS request through a terminating guard proxy: the canary's https:// sub-request
// never arrives, the endpoint is refused and the error names SSL_CERT_FILE; no origin
// sees a request.
func TestObscuraTLSCanaryRefusesUntrusted(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	o := newExampleOrigin(t, chainPages)
	p, _, ca := newTLSExamplePool(t, o, false, nil)
	out := p.Render(context.Background(), getFixture(t).url("https://selfnav.example.com/"), nil, safetyTimeout(t))
	checkCause(t, out)
	if out.FailReason != downloader.FailRendererUnavailable {
		t.Errorf("fail_reason=%s, want renderer_unavailable", failReason(out))
	}
	st := p.Stats()
	if !st.IsGuardRefused || !strings.Contains(st.LastError, "SSL_CERT_FILE="+ca.CertPath()) {
		t.Errorf("stats %+v: want the endpoint refused, naming SSL_CERT_FILE=%s", st, ca.CertPath())
	}
	for _, h := range exampleNames {
		if n := len(o.requests(h + ".example.com")); n != 0 {
			t.Errorf("%s saw %d requests from a refused endpoint", h, n)
		}
	}
}

// refusingHops admits no hop: our limiter's refusal.
type refusingHops struct{}

func (refusingHops) AdmitHop(ctx context.Context, domain string) (limiter.Admission, error) {
	return limiter.Admission{}, fmt.Errorf("hop to %s: %w", domain, context.DeadlineExceeded)
}

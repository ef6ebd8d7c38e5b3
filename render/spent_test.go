package render

import (
	"context"
	"testing"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
)

// TestRenderFailedConnectionSpendsTheSlot is SPEC §2's spent slot for renders: a main
// document whose connection to the page's host is refused or whose TLS handshake fails
// has spent the caller's admission (its connection attempt is the wire moment), while one
// refused before any packet (NXDOMAIN, the SSRF guard) gives it back. In both isolation
// modes: with IsolationWipe (configured as the shared pool) the long-lived context's relay hands the
// connection to the render's own proxy, whose dial carries the render's attempt hook.
func TestRenderFailedConnectionSpendsTheSlot(t *testing.T) {
	t.Parallel() // owns its fixture and pools (parallelTests)
	f := ownFixture(t)
	for _, iso := range []Isolation{IsolationWipe, IsolationContext} {
		t.Run(string(iso), func(t *testing.T) {
			var p hopsPool
			if iso == IsolationWipe {
				p = f.pool(t) // as the shared pool
			} else {
				var err error
				p, err = newHopsPool(Config{Concurrency: 1, WarmTabs: -1, UserAgent: testUserAgent, Guard: f.guard,
					Isolation: IsolationContext, Logger: testLogger(t)}, onSharedBrowser(t, seams{}), limiterHops{l: limiter.New(clock.Real{})})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
			}
			testFailedConnectionSpends(t, f, p)
		})
	}
}

func testFailedConnectionSpends(t *testing.T, f *fixture, p hopsPool) {
	tests := []struct {
		url     string
		domain  string
		reason  downloader.FailReason
		isSpent bool
	}{
		{"refused.test/", "refused.test", downloader.FailConnectRefused, true},
		{"https://refused.test/", "refused.test", downloader.FailConnectRefused, true},
		{"https://tls.test/", "tls.test", downloader.FailTLSFailed, true},
		{"nxdomain.test/", "nxdomain.test", downloader.FailDomainNotFound, false},
		{"https://forbidden.test/", "forbidden.test", downloader.FailDestinationForbidden, false},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			l := limiter.New(clock.Real{})
			start := time.Now() // after the limiter's loss moment, before any admission
			// Interval 0 to be admitted at once after the limiter's start; what the
			// admission leaves behind is then told by last_request_at: the loss moment
			// (before start) if it was given back, its wire moment (after start) if spent.
			adm, wait := l.Allow(time.Now(), tt.domain, 0, downloader.IntervalSourceRequest, downloader.EntryRender)
			if wait != 0 {
				t.Fatalf("not admitted: %v", wait)
			}
			out := p.Render(context.Background(), f.url(tt.url), &adm, safetyTimeout(t))
			checkCause(t, out)
			adm.Cancel()
			if out.FailReason != tt.reason {
				t.Errorf("fail_reason=%s, want %s", failReason(out), tt.reason)
			}
			st, ok := l.Domain(time.Now(), tt.domain)
			if !ok {
				t.Fatal("no runtime state for the domain")
			}
			if isSpent := !st.LastRequestAt.Before(start); isSpent != tt.isSpent {
				t.Errorf("slot spent = %v (last_request_at %v, render started %v), want %v",
					isSpent, st.LastRequestAt.Format(time.StampMicro), start.Format(time.StampMicro), tt.isSpent)
			}
		})
	}
	f.noViolations(t)
}

package render

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/origintest"
)

// TestRenderHopsPerCall: as the service wires it (Config.ShouldAdmitHops),
// a render's later main documents are admitted by the admitter passed with the call
// (RenderInSlot, the engine's per request); a render given none sends nothing to the
// hop's host and answers self_rate_limited (fail closed).
func TestRenderHopsPerCall(t *testing.T) {
	t.Parallel() // owns its fixture and pool (parallelTests)
	f := ownFixture(t)
	o := origintest.New(http.HandlerFunc(hopOrigin))
	t.Cleanup(o.Close)
	rule, err := netguard.ParseConnectTo(o.ConnectTo())
	if err != nil {
		t.Fatal(err)
	}
	guard := netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}, Resolver: fakeResolver{}, Dialer: loopbackOnly{f}})
	p, err := newPool(Config{Concurrency: 1, WarmTabs: 1, UserAgent: testUserAgent, Guard: guard, ShouldAdmitHops: true,
		Logger: testLogger(t)}, onSharedBrowser(t, seams{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	renderIn := func(hops HopAdmitter) *downloader.Outcome {
		t.Helper()
		release, failed := p.AcquireSlot(context.Background())
		if failed != nil {
			t.Fatalf("no slot: %+v", failed)
		}
		defer release()
		out := p.RenderInSlot(context.Background(), f.url("cross-a.test/"), nil, hops, downloader.RenderOptions{Timeout: 20 * time.Second})
		checkCause(t, out)
		return out
	}

	rec := &hopRecorder{hops: limiterHops{l: limiter.New(clock.Real{})}}
	out := renderIn(rec)
	if out.FailReason != "" || out.FinalURL != "http://cross-b.test/landing" {
		t.Fatalf("with an admitter: fail_reason=%s final_url=%q", failReason(out), out.FinalURL)
	}
	if got := rec.take(); !slices.Equal(got, []string{"cross-b.test"}) {
		t.Errorf("hops admitted by the call's admitter: %v, want [cross-b.test]", got)
	}

	before := o.CountByHost()["cross-b.test"]
	out = renderIn(nil)
	if out.FailReason != downloader.FailSelfRateLimited || out.Summary("cross-a.test").HasReachedOrigin {
		t.Errorf("without an admitter: fail_reason=%s, want self_rate_limited, not reached", failReason(out))
	}
	if got := o.CountByHost()["cross-b.test"]; got != before {
		t.Errorf("the hop's host saw %d requests of a hop never admitted", got-before)
	}
}

package render

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/egressproxy"
	"downloader/internal/proxytest"
	"downloader/limiter"
	"downloader/netguard"
)

// proxyCounter dials the egress proxy through the fixture's loopback-only dialer and
// counts the connections.
type proxyCounter struct {
	d     loopbackOnly
	count atomic.Int64
}

func (p *proxyCounter) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	p.count.Add(1)
	return p.d.DialContext(ctx, network, address)
}

// TestObscuraGuardProxyThroughEgressProxy: with a remote CDP server whose only proxy is
// our guard proxy (Obscura's setup, on the relay in front of Chromium), the guard proxy's
// dials to origins go through the operator's egress proxy (real squid): the page and its
// XHRs arrive, and a target the proxy cannot connect to is the site's connect_refused.
func TestObscuraGuardProxyThroughEgressProxy(t *testing.T) {
	t.Parallel() // owns its fixture and pool (parallelTests)
	f := ownFixture(t)
	sq := proxytest.Squid(t, proxytest.SquidOptions{})
	pc := &proxyCounter{d: loopbackOnly{f}}
	d, err := egressproxy.New(egressproxy.Config{URL: sq.URL, Dialer: pc, Resolver: fakeResolver{}})
	if err != nil {
		t.Fatal(err)
	}
	var rules []netguard.Rule
	deadPort := proxytest.ClosedPort(t) // refuses for the whole test
	for _, s := range []string{"js.test:80:127.0.0.1:" + f.port, "refused.test:80:127.0.0.1:" + deadPort} {
		rules = append(rules, mustRule(s))
	}
	guard := netguard.New(netguard.Config{ConnectTo: rules, Resolver: fakeResolver{}, Dialer: d})

	ln := listenLoopback(t)
	relay := newObscuraRelay(t, startProxiedBrowser(t, "http://"+ln.Addr().String()))
	p, err := newHopsPool(Config{Endpoint: relay.url(), Concurrency: 1, QueueLength: 2, UserAgent: testUserAgent, Guard: guard,
		Logger: testLogger(t)}, seams{guardProxyLn: ln}, &hopRecorder{hops: limiterHops{l: limiter.New(clock.Real{})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	mark := f.mark()
	out := render(t, p, "js.test/", 20*time.Second)
	if out.FailReason != "" || deref(out.TextLength) <= deref(out.RawTextLength) {
		t.Fatalf("js.test: fail_reason=%s text_length=%d raw_text_length=%d, want the rendered article",
			failReason(out), deref(out.TextLength), deref(out.RawTextLength))
	}
	if n := len(f.requestsTo("js.test", mark)); n < 2 {
		t.Errorf("js.test saw %d requests, want the page and its XHRs", n)
	}
	if pc.count.Load() == 0 {
		t.Error("no connection went to the egress proxy")
	}
	out = render(t, p, "refused.test/", 20*time.Second)
	if out.FailReason != downloader.FailConnectRefused {
		t.Errorf("refused.test: fail_reason=%s, want connect_refused (squid's 503)", failReason(out))
	}
	f.noViolations(t)
}

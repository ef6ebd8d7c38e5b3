package robots

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"downloader"
	"downloader/clock"
	"downloader/egressproxy"
	"downloader/fetch"
	"downloader/internal/proxytest"
	"downloader/internal/testkit"
	"downloader/limiter"
	"downloader/netguard"
)

// countingLoopback dials the proxy (loopback only) and counts the connections.
type countingLoopback struct{ count atomic.Int64 }

func (d *countingLoopback) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.count.Add(1)
	return loopbackDialer{}.DialContext(ctx, network, address)
}

// TestRobotsThroughEgressProxy: robots.txt is fetched through each real egress proxy (its
// rules then decide as without one), and every connection went to the proxy.
func TestRobotsThroughEgressProxy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) string
	}{
		{"squid", func(t *testing.T) string { return proxytest.Squid(t, proxytest.SquidOptions{}).URL }},
		{"dante_socks5", func(t *testing.T) string { return proxytest.Dante(t).URL }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig(t, clock.Real{}) // its origin and its robots files; the runner is rebuilt below
			pd := &countingLoopback{}
			d, err := egressproxy.New(egressproxy.Config{URL: tc.start(t), Dialer: pd, Resolver: testkit.NoResolver{T: t}})
			if err != nil {
				t.Fatal(err)
			}
			rule, err := netguard.ParseConnectTo(rg.origin.ConnectTo())
			if err != nil {
				t.Fatal(err)
			}
			guard := netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}, Dialer: d, Resolver: testkit.NoResolver{T: t}})
			lim := limiter.New(clock.Real{})
			f := fetch.New(fetch.Config{Guard: guard})
			t.Cleanup(f.Close)
			runner, err := New(Config{Next: rg.next, Fetcher: newEngine(clock.Real{}, lim, f, nil), Clock: clock.Real{},
				UserAgent: "downloader/1.0 (+https://example.invalid/crawler)"})
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range []struct {
				url  string
				skip downloader.SkipReason
			}{
				{"http://rules.test/private", downloader.SkipRobotsDisallowed},
				{"http://rules.test/private/open/page", ""},
				{"http://star.test/", downloader.SkipRobotsDisallowed},
			} {
				out := runner.RunTask(t.Context(), task(string(rune('a'+i)), c.url, 0))
				if out.Report == nil || out.Report.SkipReason != c.skip {
					t.Errorf("%s: %+v, want skip_reason %q", c.url, out.Report, c.skip)
				}
			}
			if got := rg.robotsRequests(); got["rules.test"] != 1 || got["star.test"] != 1 {
				t.Errorf("robots.txt requests %v, want one per site", got)
			}
			if pd.count.Load() == 0 {
				t.Error("no connection went to the proxy")
			}
		})
	}
}

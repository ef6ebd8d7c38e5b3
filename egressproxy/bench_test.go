package egressproxy_test

import (
	"testing"

	"downloader/fetch"
	"downloader/netguard"
	"downloader/origintest"
)

// BenchmarkFetchThroughProxy: plain fetches of a small page at a loopback origin, direct
// and through each real proxy, on a kept-alive connection (the tunnel's relay cost) and on
// a new connection per request (FetchOnce: a CONNECT or SOCKS5 handshake each). The
// figures and how to run it are in docs/benchmarks.md.
func BenchmarkFetchThroughProxy(b *testing.B) {
	origin := origintest.New(nil)
	defer origin.Close()
	kinds := append([]proxyKind{{"direct", nil}}, proxyKinds...)
	for _, pk := range kinds {
		for _, mode := range []string{"keepalive", "new_connection"} {
			b.Run(pk.name+"/"+mode, func(b *testing.B) {
				var guard *netguard.Guard
				if pk.start == nil {
					r, err := netguard.ParseConnectTo(origin.ConnectTo())
					if err != nil {
						b.Fatal(err)
					}
					guard = netguard.New(netguard.Config{ConnectTo: []netguard.Rule{r}})
				} else {
					proxyURL, creds := pk.start(b)
					guard, _ = guardThrough(b, proxyURL, creds, []string{origin.ConnectTo()}, nil)
				}
				f := fetch.New(fetch.Config{Guard: guard})
				defer f.Close()
				u := mustURL("http://bench.test/")
				fetchOne := f.Fetch
				if mode == "new_connection" {
					fetchOne = f.FetchOnce
				}
				if out := fetchOne(b.Context(), u, nil, nil); out.FailReason != "" {
					b.Fatalf("warm-up: %q", out.FailReason)
				}
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					if out := fetchOne(b.Context(), u, nil, nil); out.FailReason != "" {
						b.Fatalf("request %d: %q", i, out.FailReason)
					}
				}
			})
		}
	}
}

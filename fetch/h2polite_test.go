package fetch

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"
	"net/url"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"downloader"
	"downloader/internal/testkit"
	"downloader/limiter"
	"downloader/netguard"
)

// TestH2Politeness: requests to one host over HTTP/2 share one connection, each a stream,
// and the origin never sees two HEADERS frames closer than the interval: each stream's
// HEADERS passes the admission's wire gate. The requests are reserved at once and sent at
// once, so only the gate holds each to its slot, with busy goroutines on every P. The
// origin is an HTTP/2 server on x/net's framer that stamps each HEADERS frame with the
// kernel's receive time (origintest.Listen): net/http's server cannot say which bytes
// were which stream's.
func TestH2Politeness(t *testing.T) {
	const (
		interval     = 100 * time.Millisecond
		requestCount = 6
	)
	ca, leaf := testLeaf(t)
	origin, port := startStampedH2(t, leaf, func(int, int) h2Behaviour { return h2Answer })
	l := limiter.New(&startedEarlier{})
	rule, err := netguard.ParseConnectTo("*.example.com::127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	f := New(Config{
		Guard: netguard.New(netguard.Config{
			Resolver: &testkit.Resolver{Answers: map[string][]netip.Addr{}}, ConnectTo: []netguard.Rule{rule},
			Dialer: &checkDialer{t: t}}),
		TLSConfig: &tls.Config{RootCAs: ca.Pool()},
	})
	defer f.Close()

	var stop atomic.Bool
	var busy sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		busy.Go(func() {
			for !stop.Load() {
				for i := 0; i < 1e5; i++ {
					_ = i * i
				}
			}
		})
	}
	const domain = "www.example.com"
	var wg sync.WaitGroup
	for r := range requestCount {
		wg.Go(func() {
			u, _ := url.Parse(fmt.Sprintf("https://%s/%d", domain, r))
			adm, _, ok := l.Reserve(time.Now(), domain, interval, downloader.IntervalSourceRequest, downloader.EntryLease, time.Time{})
			if !ok {
				t.Errorf("%s: no reservation", u)
				return
			}
			out := f.Fetch(context.Background(), u, &adm, intervalHops{l})
			adm.Cancel()
			if out.FailReason != "" || versionOf(out) != "2" {
				t.Errorf("%s: fail_reason %q http_version %s", u, out.FailReason, versionOf(out))
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	busy.Wait()

	arrivals := origin.stamped()
	if len(arrivals) != requestCount {
		t.Fatalf("%d HEADERS frames, want %d", len(arrivals), requestCount)
	}
	streamsOn := map[int]int{}
	var stamped []h2Arrival
	for _, a := range arrivals {
		streamsOn[a.conn]++
		if !a.at.IsZero() {
			stamped = append(stamped, a)
		}
	}
	// A frame the origin read together with the one before it has no stamp of its own
	// (the busy cores can delay the origin's read past the next frame's arrival): the
	// gaps are checked between the stamped ones, each no earlier than its frame.
	if len(stamped) < requestCount/2 {
		t.Fatalf("%d of %d HEADERS frames stamped: the others came in one read with the frame before them (bunched, under the interval; or the origin's reads starved)",
			len(stamped), requestCount)
	}
	t.Logf("%d of %d HEADERS frames stamped", len(stamped), requestCount)
	arrivals = stamped
	// net/http may dial a second connection for a request that waits while the first is
	// set up; the streams still go out one interval apart, whichever connection carries
	// them.
	t.Logf("streams by connection: %v (%d connections)", streamsOn, origin.accepts.Load())
	if len(streamsOn) != 1 {
		t.Errorf("streams came on %d connections, want one HTTP/2 connection: %v", len(streamsOn), streamsOn)
	}
	sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].at.Before(arrivals[j].at) })
	minGap := time.Duration(1<<63 - 1)
	for i := 1; i < len(arrivals); i++ {
		gap := arrivals[i].at.Sub(arrivals[i-1].at)
		minGap = min(minGap, gap)
		if gap < interval {
			t.Errorf("the origin saw streams %d and %d %v apart, under the interval %v", i-1, i, gap, interval)
		}
	}
	t.Logf("smallest gap at the origin: %v", minGap)
}

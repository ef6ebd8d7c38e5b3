package fetch

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"downloader/internal/nginxtest"
)

// BenchmarkNginxProtocol: plain fetches of one 26 KB HTML page (brotli on the wire, as
// nginx sends it to our Accept-Encoding) from a real nginx over TLS, HTTP/1.1 against
// HTTP/2, side by side in one run. Parallel requests over 8 hosts at interval 0 (the
// limiter still admits and gates each one). Reported: pages/s, and the CPU of this
// process (the fetcher: TLS, framing, decoding, text measure; not nginx's) per page.
// docs/benchmarks.md has the figures.
//
//	go test -run '^$' -bench NginxProtocol -benchtime 3000x ./fetch
func BenchmarkNginxProtocol(b *testing.B) {
	page := []byte("<!doctype html><html><head><title>bench</title></head><body>" +
		strings.Repeat("<p>Some text of the page, long enough to be worth compressing. 123</p>", 380) + "</body></html>")
	s := nginxtest.Start(b, map[string][]byte{"page.html": page})
	for _, proto := range []struct {
		name        string
		isHTTP2Off  bool
		wantVersion string
	}{{"http1.1", true, "1.1"}, {"http2", false, "2"}} {
		b.Run(proto.name, func(b *testing.B) {
			e := nginxEnv(b, s, withConfig(func(c *Config) { c.DisableHTTP2 = proto.isHTTP2Off }))
			var n atomic.Int64
			// Warm: one connection per host, as a crawl that already visited them.
			for h := range 8 {
				e.fetch(context.Background(), fmt.Sprintf("https://h%d.example.com/page.html", h))
			}
			cpu0 := cpuTime()
			start := time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					out := e.fetch(context.Background(), fmt.Sprintf("https://h%d.example.com/page.html", i%8))
					if out.FailReason != "" || versionOf(out) != proto.wantVersion || out.HealthSignal.BodyBytes != int64(len(page)) {
						b.Errorf("fetch: %q over %s, %d bytes", out.FailReason, versionOf(out), out.HealthSignal.BodyBytes)
						return
					}
				}
			})
			b.StopTimer()
			elapsed, cpu := time.Since(start), cpuTime()-cpu0
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pages/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/page")
		})
	}
}

// cpuTime is this process's user and system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package limiter

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"downloader/clock"
)

// benchDomainCount is the table size the admission benchmarks run at (SPEC §2: 10^5–10^6
// active domains).
const benchDomainCount = 1_000_000

// benchInterval is short enough that, with the benchmark's clock moving 1 µs per
// admission, every domain's interval has passed when its turn comes again (10^6 µs = 1 s
// later): each admission takes the common, not limited, path.
const benchInterval = 100 * time.Millisecond

// domainNames returns n distinct host names shaped like real ones.
func domainNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("www.site-%07d.example.com", i)
	}
	return names
}

// filledLimiter returns a limiter tracking every name, all admitted and done at start,
// and the instant after which every interval has passed.
func filledLimiter(names []string) (*Limiter, time.Time) {
	l := New(clock.NewFake(t0))
	start := at(past)
	for _, d := range names {
		a, _ := l.Allow(start, d, benchInterval, srcRequest, entryB)
		a.Done()
	}
	return l, start.Add(time.Second)
}

// BenchmarkAllow measures the common admission path at 10^6 tracked domains: the domain is
// known and its interval has passed. One op is Allow + Done. Run with -cpu 1,2,4.
func BenchmarkAllow(b *testing.B) {
	names := domainNames(benchDomainCount)
	l, base := filledLimiter(names)
	n := len(names)

	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		refused := 0
		for i := 0; b.Loop(); i++ {
			now := base.Add(time.Duration(i) * time.Microsecond)
			a, _ := l.Allow(now, names[i%n], benchInterval, srcRequest, entryB)
			if !a.Admitted() {
				refused++
			}
			a.Done()
		}
		base = base.Add(time.Duration(b.N)*time.Microsecond + time.Second)
		if refused > 0 {
			b.Fatalf("%d admissions refused: the benchmark left the common path", refused)
		}
	})

	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		// Each goroutine owns the names i with i%procs == id, so its own clock, moving
		// 1 µs per admission, is monotonic for every domain it touches.
		procs := runtime.GOMAXPROCS(0)
		var ids, refused atomic.Int64
		start := base
		b.RunParallel(func(pb *testing.PB) {
			id := int(ids.Add(1)-1) % procs
			i := id
			tick := 0
			for pb.Next() {
				now := start.Add(time.Duration(tick) * time.Microsecond)
				a, _ := l.Allow(now, names[i], benchInterval, srcRequest, entryB)
				if !a.Admitted() {
					refused.Add(1)
				}
				a.Done()
				tick++
				if i += procs; i >= n {
					i = id
				}
			}
		})
		base = base.Add(time.Duration(b.N)*time.Microsecond + time.Second)
		if r := refused.Load(); r > 0 {
			b.Fatalf("%d admissions refused: the benchmark left the common path", r)
		}
	})
}

// BenchmarkGate measures the global cap's fast path: TryAcquire + Release with room.
func BenchmarkGate(b *testing.B) {
	g := NewGate(1<<30, 64)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !g.TryAcquire() {
				b.Fatal("TryAcquire failed with room")
			}
			g.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !g.TryAcquire() {
					b.Error("TryAcquire failed with room")
					return
				}
				g.Release()
			}
		})
	})
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// bytesPerDomain inserts names into a fresh limiter and returns the heap it grew by,
// per domain: the entry, its share of the shard maps and its 24 h statistics. The names
// themselves are allocated before the first measurement and not counted.
func bytesPerDomain(names []string) float64 {
	clk := clock.NewFake(t0)
	now := at(past)
	before := heapInUse()
	l := New(clk)
	for _, d := range names {
		a, _ := l.Allow(now, d, benchInterval, srcRequest, entryB)
		a.Done()
	}
	after := heapInUse()
	runtime.KeepAlive(l)
	runtime.KeepAlive(names)
	return float64(after-before) / float64(len(names))
}

// BenchmarkMemoryPerDomain reports the memory per tracked domain at 10^6 domains
// (target ≤ 256 B). Its ns/op is meaningless: the measurement runs once.
func BenchmarkMemoryPerDomain(b *testing.B) {
	names := domainNames(benchDomainCount)
	perDomain := bytesPerDomain(names)
	for b.Loop() {
	}
	b.ReportMetric(perDomain, "B/domain")
	b.ReportMetric(0, "ns/op")
}

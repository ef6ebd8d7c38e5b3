package limiter

import (
	"downloader/clock/clocktest"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
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
	l := New(clocktest.NewFake(t0))
	start := at(past)
	for _, d := range names {
		a, _ := l.Allow(start, d, benchInterval, srcRequest, entryB)
		a.Done()
	}
	return l, start.Add(time.Second)
}

// BenchmarkAllow measures the common admission path at 10^6 tracked domains: the domain is
// known and its interval has passed. One op is Allow + Done. Run with -cpu 1,2,4.
//
// Besides ns/op (wall time) it reports cpu-ns/op, the process CPU time per op, which
// stays meaningful on a machine shared with other work. In the parallel runs cpu-ns/op
// sums every goroutine's CPU: divide by the goroutine count for the wall time one op would
// take on idle cores.
func BenchmarkAllow(b *testing.B) {
	benchmarkAllow(b, benchDomainCount)
}

// BenchmarkAllowCached is BenchmarkAllow at 10^3 domains, whose state fits in the CPU
// caches: the cost of the code path itself, without the memory misses of a large table.
func BenchmarkAllowCached(b *testing.B) {
	benchmarkAllow(b, 1000)
}

func benchmarkAllow(b *testing.B, domainCount int) {
	names := domainNames(domainCount)
	l, base := filledLimiter(names)
	n := len(names)
	// Each domain comes round again after n admissions; the clock must have moved by
	// more than benchInterval by then.
	step := max(time.Microsecond, 2*benchInterval/time.Duration(n))

	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		refused := 0
		cpu := processCPU()
		for i := 0; b.Loop(); i++ {
			now := base.Add(time.Duration(i) * step)
			a, _ := l.Allow(now, names[i%n], benchInterval, srcRequest, entryB)
			if !a.Admitted() {
				refused++
			}
			a.Done()
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		base = base.Add(time.Duration(b.N)*step + time.Second)
		if refused > 0 {
			b.Fatalf("%d admissions refused: the benchmark left the common path", refused)
		}
	})

	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		// Each goroutine owns the names i with i%procs == id, so its own clock, moving
		// one step per admission, is monotonic for every domain it touches.
		procs := runtime.GOMAXPROCS(0)
		step := max(time.Microsecond, 2*benchInterval*time.Duration(procs)/time.Duration(n))
		var ids, refused atomic.Int64
		start := base
		cpu := processCPU()
		b.RunParallel(func(pb *testing.PB) {
			id := int(ids.Add(1)-1) % procs
			i := id
			tick := 0
			for pb.Next() {
				now := start.Add(time.Duration(tick) * step)
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
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		base = base.Add(time.Duration(b.N)*step + time.Second)
		if r := refused.Load(); r > 0 {
			b.Fatalf("%d admissions refused: the benchmark left the common path", r)
		}
	})
}

// BenchmarkMapLookup is the floor under BenchmarkAllow: one lookup in a plain
// map[string]*entry of 10^6 domains, in the same order, and the same writes to the entry
// (last_request_at, in_flight_count, the hourly count), without shards, locks, the
// admission rule or the service-wide statistics.
func BenchmarkMapLookup(b *testing.B) {
	names := domainNames(benchDomainCount)
	m := make(map[string]*entry)
	for _, d := range names {
		m[d] = &entry{}
	}
	n := len(names)
	cpu := processCPU()
	for i := 0; b.Loop(); i++ {
		en := m[names[i%n]]
		en.lastNs = int64(i)
		en.inFlight++
		en.requests.add(hourOf(int64(i)*int64(time.Microsecond)), 1)
		en.inFlight--
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
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
	clk := clocktest.NewFake(t0)
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

// TestMemoryPerDomain holds the memory target (≤ 256 B per tracked domain, entry and 24 h
// statistics together) at 10^5 domains; BenchmarkMemoryPerDomain reports it at 10^6.
func TestMemoryPerDomain(t *testing.T) {
	const limit = 256
	perDomain := bytesPerDomain(domainNames(100_000))
	t.Logf("%.1f B/domain at 10^5 domains", perDomain)
	if perDomain > limit {
		t.Fatalf("%.1f B per domain, target ≤ %d", perDomain, limit)
	}
}

// TestAllowDoesNotAllocate: the common path (domain known, interval passed) allocates
// nothing: Allow, Wire and Done, and a refusal too.
func TestAllowDoesNotAllocate(t *testing.T) {
	l, _ := newFake()
	now := at(past)
	a := mustAllow(t, l, now, "example.com", time.Millisecond)
	a.Done()
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		a, _ := l.Allow(now, "example.com", time.Millisecond, srcRequest, entryB)
		if !a.Admitted() {
			t.Fatal("refused")
		}
		a.Wire(now)
		a.Done()
		if b, _ := l.Allow(now, "example.com", time.Millisecond, srcRequest, entryC); b.Admitted() {
			t.Fatal("admitted twice at one instant")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per admission, want 0", allocs)
	}
}

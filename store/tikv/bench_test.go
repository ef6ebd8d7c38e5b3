package tikv

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tikv/client-go/v2/kv"
	"github.com/tikv/client-go/v2/rawkv"
	tikvclient "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader"
	"downloader/engine"
	"downloader/limiter"
	"downloader/store/tikv/tikvtest"
)

// benchWorkers is the number of goroutines admitting per instance: a busy instance has
// about as many requests starting at once as its share of the global cap allows.
const benchWorkers = 16

// BenchmarkAdmission measures shared admissions per second and per instance on the mock
// cluster. admit: each operation is one Admit. admit+done: one Admit and, when admitted,
// its two write-backs (Wired, then Done), as the engine does per request, with each
// runtime's Run going so that write-backs are batched off the request's path as in
// production. Spread: 10^4 domains, so instances rarely meet on a key. Contended: 4
// domains for all instances and workers. Interval 0: the rate is the store's, not the
// politeness rule's; on the contended runs an admission refused because another instance
// has the domain in flight still counts as a decision. 1pc: one-phase and async commit
// on, as in production (the mock ignores them and the client falls back to two-phase
// commit after one timestamp more); 2pc: off. The requests per operation sent to TiKV and
// PD are reported (get/op, prewrite/op, commit/op, tso/op), write-backs included.
//
//	go test -run '^$' -bench BenchmarkAdmission -benchtime 3s ./store/tikv/
func BenchmarkAdmission(b *testing.B) {
	for _, n := range []int{1, 3} {
		for _, spread := range []bool{true, false} {
			for _, withDone := range []bool{false, true} {
				name := fmt.Sprintf("instances=%d/contended", n)
				domains := 4
				if spread {
					name = fmt.Sprintf("instances=%d/spread", n)
					domains = 10_000
				}
				if withDone {
					name += "/admit+done"
				} else {
					name += "/admit"
				}
				for _, twoPC := range []bool{false, true} {
					commit := "/1pc"
					if twoPC {
						commit = "/2pc"
					}
					b.Run(name+commit, func(b *testing.B) {
						benchAdmission(b, benchRun{instances: n, domains: domains, withDone: withDone, twoPC: twoPC})
					})
				}
			}
		}
	}
}

// mix scrambles an operation's number into a domain's (splitmix64's finaliser), so that
// operations pick domains independently. (An earlier arithmetic choice, 7k + 31i + w,
// made different instances pick the same domain a few operations apart: the spread runs
// were contended across instances and the rule refused a third of them.)
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// BenchmarkAdmissionStripes compares the number of per-domain stripes (admissionState.stripes)
// side by side: spread, admit+done, 1 and 3 instances.
//
//	go test -run '^$' -bench BenchmarkAdmissionStripes -benchtime 3s ./store/tikv/
func BenchmarkAdmissionStripes(b *testing.B) {
	for _, n := range []int{1, 3} {
		for _, stripes := range []int{256, defaultStripeCount} {
			b.Run(fmt.Sprintf("instances=%d/stripes=%d", n, stripes), func(b *testing.B) {
				benchAdmission(b, benchRun{instances: n, domains: 10_000, withDone: true, stripes: stripes})
			})
		}
	}
}

// BenchmarkAdmissionRTT is BenchmarkAdmission (admit+done, 1pc) with 1 ms ± 0.2 ms
// injected on every TiKV and PD round trip of every instance (tikvtest.Faults), as a real
// cluster's network adds, at 16 and 64 workers per instance (64: a share of the cap of 64
// all starting at once). It reports the p50 and p99 admission latency.
//
//	go test -run '^$' -bench BenchmarkAdmissionRTT -benchtime 3s ./store/tikv/
func BenchmarkAdmissionRTT(b *testing.B) {
	for _, n := range []int{1, 3} {
		for _, spread := range []bool{true, false} {
			for _, workers := range []int{16, 64} {
				domains, kind := 10_000, "spread"
				if !spread {
					domains, kind = 4, "contended"
				}
				b.Run(fmt.Sprintf("instances=%d/%s/workers=%d", n, kind, workers), func(b *testing.B) {
					benchAdmission(b, benchRun{instances: n, domains: domains, withDone: true, workers: workers, rtt: time.Millisecond})
				})
			}
		}
	}
}

// benchRun is one benchmark configuration.
type benchRun struct {
	instances, domains int
	withDone           bool
	stripes            int // 0: the default
	twoPC              bool
	workers            int           // per instance; 0: benchWorkers
	rtt                time.Duration // injected per round trip (± a fifth); 0: none
}

func benchAdmission(b *testing.B, run benchRun) {
	instances, domains, withDone, stripes, twoPC := run.instances, run.domains, run.withDone, run.stripes, run.twoPC
	workers := run.workers
	if workers <= 0 {
		workers = benchWorkers
	}
	c := tikvtest.NewCluster(b)
	rts := make([]*Runtime, instances)
	stores := make([]*Store, instances)
	clients := make([]*tikvtest.Client, instances)
	for i := range rts {
		s, cl := openStore(b, c)
		s.twoPC = twoPC
		if run.rtt > 0 {
			cl.SetFaults(tikvtest.Faults{Latency: run.rtt, Jitter: run.rtt / 5, Seed: uint64(i + 1)})
		}
		stores[i], clients[i] = s, cl
		rt, err := NewRuntime(s, RuntimeConfig{Share: engine.EvenShare, InstanceID: fmt.Sprintf("bench-%d", i), Gate: limiter.NewGate(64, 64), stripeCount: stripes,
			TSOLag: time.Millisecond}) // the mock's TSO follows the local clock
		if err != nil {
			b.Fatal(err)
		}
		rts[i] = rt
	}
	names := make([]string, domains)
	for i := range names {
		names[i] = fmt.Sprintf("d%05d.example", i)
	}
	// The fresh table gets a loss marker in the past, so no domain waits for it; then every
	// instance registers.
	seedPastLoss(b, stores[0])
	for _, rt := range rts {
		if err := rt.Heartbeat(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	// Run keeps the heartbeats (the lease Admit checks) and the write-back writer going.
	runCtx, stop := context.WithCancel(context.Background())
	var running sync.WaitGroup
	for _, rt := range rts {
		running.Go(func() { _ = rt.Run(runCtx) })
	}
	defer func() { stop(); running.Wait() }()

	var next, admitted, refused, failed atomic.Int64
	ctx := context.Background()
	sent := func() (n tikvtest.Counts) {
		for _, cl := range clients {
			n = n.Add(cl.Counts())
		}
		return n
	}
	b.ResetTimer()
	start, cpu, sent0 := time.Now(), processCPU(), sent()
	var wg sync.WaitGroup
	var latMu sync.Mutex
	var lats []time.Duration // every admission's, merged per worker
	for _, rt := range rts {
		for range workers {
			wg.Go(func() {
				var mine []time.Duration
				defer func() {
					latMu.Lock()
					lats = append(lats, mine...)
					latMu.Unlock()
				}()
				for {
					k := next.Add(1)
					if k > int64(b.N) {
						return
					}
					d := names[mix(uint64(k))%uint64(domains)]
					t0 := time.Now()
					tk, _, err := rt.Admit(ctx, downloader.SharedAdmit{Domain: d, IntervalSource: downloader.IntervalSourceRequest,
						Entry: downloader.EntryProbe, Now: t0, Timeout: time.Second})
					mine = append(mine, time.Since(t0))
					if err != nil {
						failed.Add(1) // failed closed: TiKV did not answer within AdmitTimeout
						continue
					}
					if tk == nil {
						refused.Add(1)
						continue
					}
					admitted.Add(1)
					if withDone {
						tk.Wired(time.Now())
						tk.Done(ctx, time.Now())
					}
				}
			})
		}
	}
	wg.Wait()
	if withDone {
		stop() // the last write-backs are part of the work
		running.Wait()
	}
	el := time.Since(start).Seconds()
	used := processCPU() - cpu
	b.StopTimer()
	reportCPU(b, used)
	rpcs := sent().Sub(sent0)
	perOp := func(n int64) float64 { return float64(n) / float64(max(1, b.N)) }
	b.ReportMetric(perOp(rpcs.Get+rpcs.BatchGet), "get/op")
	b.ReportMetric(perOp(rpcs.Prewrite), "prewrite/op")
	b.ReportMetric(perOp(rpcs.Commit), "commit/op")
	b.ReportMetric(perOp(rpcs.TSO), "tso/op")
	b.ReportMetric(float64(b.N)/el/float64(instances), "decisions/s/instance")
	b.ReportMetric(float64(admitted.Load())/el/float64(instances), "admitted/s/instance")
	b.ReportMetric(float64(refused.Load())/float64(max(1, b.N)), "refused/op")
	b.ReportMetric(float64(failed.Load())/float64(max(1, b.N)), "failed/op")
	conflicts := int64(0)
	for _, s := range stores {
		conflicts += s.conflicts.Load()
	}
	b.ReportMetric(float64(conflicts)/float64(max(1, b.N)), "conflicts/op")
	if len(lats) > 0 {
		slices.Sort(lats)
		b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "p50_ms")
		b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds())/1000, "p99_ms")
	}
}

// BenchmarkReadCheckWrite compares the ways to make one atomic read-check-write of a
// domain's key on the mock cluster, one instance, 16 workers: the optimistic transaction
// Runtime uses, a pessimistic transaction (lock, read, write, commit) and raw
// CompareAndSwap (on keys created beforehand: the mock's CAS cannot create a key).
//
//	go test -run '^$' -bench BenchmarkReadCheckWrite -benchtime 3s ./store/tikv/
func BenchmarkReadCheckWrite(b *testing.B) {
	for _, domains := range []int{4, 10_000} {
		for _, mode := range []string{"optimistic", "pessimistic", "raw_cas"} {
			b.Run(fmt.Sprintf("domains=%d/%s", domains, mode), func(b *testing.B) { benchRCW(b, mode, domains) })
		}
	}
}

func benchRCW(b *testing.B, mode string, domains int) {
	c := tikvtest.NewCluster(b)
	cl := c.NewClient(b)
	s, err := New(cl.KV, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	keyOf := func(i int) []byte { return fmt.Appendf(nil, "bench:rcw:%s:%05d", mode, i%domains) }
	var raw *rawkv.Client
	if mode == "raw_cas" {
		raw = newMockRawClient(cl.KV)
		b.Cleanup(func() { _ = raw.Close() })
		for i := range domains {
			if err := raw.Put(ctx, keyOf(i), []byte("0")); err != nil {
				b.Fatal(err)
			}
		}
	}
	var next, retries atomic.Int64
	b.ResetTimer()
	start, cpu := time.Now(), processCPU()
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Go(func() {
			for {
				k := next.Add(1)
				if k > int64(b.N) {
					return
				}
				key := keyOf(int(k))
				val := fmt.Appendf(nil, "%d", k)
				var err error
				switch mode {
				case "optimistic":
					err = s.update(ctx, func(txn *transaction.KVTxn) error {
						if _, err := txn.Get(ctx, key); err != nil && !isNotFound(err) {
							return err
						}
						return txn.Set(key, val)
					})
				case "pessimistic":
					err = pessimisticRCW(ctx, s, key, val)
				case "raw_cas":
					for {
						prev, gerr := raw.Get(ctx, key)
						if gerr != nil {
							err = gerr
							break
						}
						_, ok, cerr := raw.CompareAndSwap(ctx, key, prev, val)
						if cerr != nil || ok {
							err = cerr
							break
						}
						retries.Add(1)
					}
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	used := processCPU() - cpu
	b.StopTimer()
	reportCPU(b, used)
	b.ReportMetric(float64(b.N)/el, "ops/s")
}

func pessimisticRCW(ctx context.Context, s *Store, key, val []byte) error {
	for {
		txn, err := s.begin(ctx)
		if err != nil {
			return err
		}
		txn.SetPessimistic(true)
		forUpdate, err := s.timestamp(ctx)
		if err != nil {
			return err
		}
		if err := txn.LockKeys(ctx, kv.NewLockCtx(forUpdate, 1000, time.Now()), key); err != nil {
			_ = txn.Rollback()
			if isConflict(err) {
				continue
			}
			return err
		}
		if _, err := txn.Get(ctx, key); err != nil && !isNotFound(err) {
			_ = txn.Rollback()
			return err
		}
		if err := txn.Set(key, val); err != nil {
			_ = txn.Rollback()
			return err
		}
		if err := txn.Commit(ctx); err != nil {
			if isConflict(err) {
				continue
			}
			return err
		}
		return nil
	}
}

// newMockRawClient builds a raw client over the mock cluster of kv (client-go's tests do
// the same through ClientProbe).
func newMockRawClient(kvs *tikvclient.KVStore) *rawkv.Client {
	p := rawkv.ClientProbe{Client: &rawkv.Client{}}
	p.SetPDClient(kvs.GetPDClient())
	p.SetRegionCache(tikvclient.NewRegionCache(kvs.GetPDClient()))
	p.SetRPCClient(kvs.GetTiKVClient())
	p.SetAtomicForCAS(true)
	return p.Client
}

// reportCPU reports the process CPU time per op (the mock TiKV's included: it runs in the
// process) and what it makes per core: the rate one dedicated core would sustain, which a
// machine shared with other work still measures.
func reportCPU(b *testing.B, used time.Duration) {
	if used <= 0 || b.N == 0 {
		return
	}
	per := float64(used.Microseconds()) / float64(b.N)
	b.ReportMetric(per, "cpu-us/op")
	b.ReportMetric(1e6/per, "ops/cpu-s")
}

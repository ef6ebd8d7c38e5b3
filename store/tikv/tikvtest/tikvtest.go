// Package tikvtest runs client-go's in-process mock TiKV cluster (testutils.NewMockTiKV,
// BootstrapWithSingleStore, tikv.NewTestTiKVStore) for tests and benchmarks: one cluster
// that several downloader instances share, each through its own client, and what one
// client's network does to its requests (faults.go): latency with jitter, region errors,
// ServerIsBusy, timeouts and lost answers at a rate, a PD outage, a partition of the
// client from the whole cluster (SetDown) or from some keys (Cut), and a clock offset
// (SkewedClock). No network is used.
//
// Call Init (InitBenchmark in a benchmark run) once from TestMain before making a cluster.
package tikvtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pingcap/failpoint"
	"github.com/pingcap/log"
	"github.com/tikv/client-go/v2/testutils"
	tikvclient "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/tikvrpc"
	"github.com/tikv/client-go/v2/util"
	pd "github.com/tikv/pd/client"
	"go.uber.org/goleak"
	"go.uber.org/zap/zapcore"
)

// IgnoreClosedCluster is the goleak option for tests that use a Cluster: the mock's
// LevelDB keeps one goroutine for up to a second after it is closed (mpoolDrain). An
// unclosed cluster still shows as a leak through its other goroutines.
var IgnoreClosedCluster = goleak.IgnoreTopFunction("github.com/pingcap/goleveldb/leveldb.(*DB).mpoolDrain")

// ErrUnreachable is what a client set down answers every TiKV and PD request with.
var ErrUnreachable = errors.New("tikvtest: TiKV unreachable (injected)")

// Cluster is one mock TiKV cluster (one store, one region). Safe for concurrent use.
type Cluster struct {
	rpc *testutils.MockClient
	pd  pd.Client
	// serving counts the requests the mock serves (faults.go: serve), their callers gone
	// or not: the cluster closes after them.
	serving inService

	mu      sync.Mutex
	clients []*Client
}

// livenessFailpoint is client-go's test hook for the store liveness check.
const livenessFailpoint = "tikvclient/injectLiveness"

// Init sets client-go's process-wide test knobs; call it once from TestMain, before any
// cluster exists (client-go reads them unsynchronised):
//   - after a failed request client-go checks the store's liveness with a gRPC health
//     check to the store's address; the mock's stores have made-up addresses ("store1"),
//     so the check must never dial: it answers "reachable" (the mock store always is);
//     otherwise the client marks the store unreachable and fails every later request;
//   - client-go's own logging (a zap logger) goes down to errors.
func Init() error {
	log.SetLevel(zapcore.ErrorLevel)
	util.EnableFailpoints()
	if err := failpoint.Enable(livenessFailpoint, `return("reachable")`); err != nil {
		return fmt.Errorf("tikvtest: %w", err)
	}
	return nil
}

// InitBenchmark is Init for a benchmark run: client-go's logging only. Enabled failpoints
// put a global lock on client-go's hot paths (they cost 3x the CPU of an admission), so
// benchmarks run without the liveness hook: they inject no faults, but a request that
// outlasts its deadline can then leave its client unusable (the benchmark counts what
// fails).
func InitBenchmark() {
	log.SetLevel(zapcore.ErrorLevel)
}

// IsBenchmarkRun reports whether the test binary runs benchmarks (-test.bench given); call
// it from TestMain after flag.Parse.
func IsBenchmarkRun() bool {
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}

// NewCluster starts a mock cluster that is closed when tb ends (after every client made by
// it). Init (or, in a benchmark run, InitBenchmark) must have been called.
func NewCluster(tb testing.TB) *Cluster {
	tb.Helper()
	if _, err := failpoint.Status(livenessFailpoint); err != nil && !IsBenchmarkRun() {
		tb.Fatal("tikvtest: call tikvtest.Init from TestMain first")
	}
	rpc, cluster, pdClient, err := testutils.NewMockTiKV("", nil)
	if err != nil {
		tb.Fatalf("mock TiKV: %v", err)
	}
	testutils.BootstrapWithSingleStore(cluster)
	c := &Cluster{rpc: rpc, pd: pdClient}
	tb.Cleanup(func() {
		c.mu.Lock()
		clients := c.clients
		c.clients = nil
		c.mu.Unlock()
		for _, cl := range clients {
			_ = cl.close()
		}
		c.serving.wait()
		if err := rpc.Close(); err != nil {
			tb.Errorf("close mock TiKV: %v", err)
		}
	})
	return c
}

// Client is one instance's connection to the cluster: its own *tikv.KVStore (region cache,
// oracle, lock resolver) over the shared mock. Closing the KVStore leaves the cluster up.
type Client struct {
	KV   *tikvclient.KVStore
	down *atomic.Bool
	n    *counters
	inj  *injector

	closeOnce sync.Once
	closeErr  error
}

// NewClient connects a new client. The caller may close its KV (a downloader store does);
// otherwise it is closed with the cluster.
func (c *Cluster) NewClient(tb testing.TB) *Client {
	tb.Helper()
	down := &atomic.Bool{}
	n := &counters{}
	inj := newInjector()
	kv, err := tikvclient.NewTestTiKVStore(c.rpc, c.pd,
		func(inner tikvclient.Client) tikvclient.Client {
			return &faultyRPC{Client: inner, down: down, n: n, inj: inj, serving: &c.serving}
		},
		func(inner pd.Client) pd.Client { return &faultyPD{Client: inner, down: down, n: n, inj: inj} },
		0)
	if err != nil {
		tb.Fatalf("mock TiKV client: %v", err)
	}
	cl := &Client{KV: kv, down: down, n: n, inj: inj}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl
}

// Counts is what one client asked of the cluster since it was made: TiKV requests by type
// and PD timestamps (including client-go's own background refresh, one every 2 s), each
// counted when sent, whether it succeeded or not.
type Counts struct {
	Get, BatchGet, Prewrite, Commit, OtherTiKV int64
	TSO                                        int64
}

// Sub returns c minus o: what was sent between two readings.
func (c Counts) Sub(o Counts) Counts {
	return Counts{Get: c.Get - o.Get, BatchGet: c.BatchGet - o.BatchGet, Prewrite: c.Prewrite - o.Prewrite,
		Commit: c.Commit - o.Commit, OtherTiKV: c.OtherTiKV - o.OtherTiKV, TSO: c.TSO - o.TSO}
}

// Add returns c plus o.
func (c Counts) Add(o Counts) Counts {
	return Counts{Get: c.Get + o.Get, BatchGet: c.BatchGet + o.BatchGet, Prewrite: c.Prewrite + o.Prewrite,
		Commit: c.Commit + o.Commit, OtherTiKV: c.OtherTiKV + o.OtherTiKV, TSO: c.TSO + o.TSO}
}

// counters are a client's Counts as they are sent.
type counters struct {
	get, batchGet, prewrite, commit, other, tso atomic.Int64
}

func (n *counters) request(t tikvrpc.CmdType) {
	switch t {
	case tikvrpc.CmdGet:
		n.get.Add(1)
	case tikvrpc.CmdBatchGet:
		n.batchGet.Add(1)
	case tikvrpc.CmdPrewrite:
		n.prewrite.Add(1)
	case tikvrpc.CmdCommit:
		n.commit.Add(1)
	default:
		n.other.Add(1)
	}
}

// Counts returns what this client sent so far.
func (cl *Client) Counts() Counts {
	return Counts{Get: cl.n.get.Load(), BatchGet: cl.n.batchGet.Load(), Prewrite: cl.n.prewrite.Load(),
		Commit: cl.n.commit.Load(), OtherTiKV: cl.n.other.Load(), TSO: cl.n.tso.Load()}
}

// SetDown makes every request of this client to TiKV and PD fail (true) or work again.
func (cl *Client) SetDown(down bool) { cl.down.Store(down) }

// close closes KV once, unless its owner (a downloader store) did: a KVStore closed twice
// panics.
func (cl *Client) close() error {
	cl.closeOnce.Do(func() {
		if !cl.KV.IsClose() {
			cl.closeErr = cl.KV.Close()
		}
	})
	return cl.closeErr
}

// Close closes the client's KV (idempotent); a downloader store over it must not be used
// afterwards.
func (cl *Client) Close() error { return cl.close() }

// faultyRPC counts requests, fails every request while down, injects the client's Faults
// (faults.go) and never closes the shared mock.
type faultyRPC struct {
	tikvclient.Client
	down    *atomic.Bool
	n       *counters
	inj     *injector
	serving *inService // the cluster's
}

// inService counts requests being served and waits for none. Unlike a sync.WaitGroup it
// may be waited on while a late request (a closed client's background commit) starts.
type inService struct {
	mu   sync.Mutex
	n    int
	idle *sync.Cond // signalled when n drops to 0; nil until first used
}

func (s *inService) add(d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += d
	if s.n == 0 && s.idle != nil {
		s.idle.Broadcast()
	}
}

func (s *inService) wait() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle == nil {
		s.idle = sync.NewCond(&s.mu)
	}
	for s.n > 0 {
		s.idle.Wait()
	}
}

func (f *faultyRPC) SendRequest(ctx context.Context, addr string, req *tikvrpc.Request, timeout time.Duration) (*tikvrpc.Response, error) {
	f.n.request(req.Type)
	if f.down.Load() {
		return nil, ErrUnreachable
	}
	return f.sendWithFaults(ctx, addr, req, timeout)
}

func (f *faultyRPC) Close() error { return nil }

// faultyPD counts timestamp requests, fails them while down (region lookups are served
// from the client's cache or fail with the RPCs anyway) and never closes the shared mock.
type faultyPD struct {
	pd.Client
	down *atomic.Bool
	n    *counters
	inj  *injector
}

type failedTS struct{}

func (failedTS) Wait() (int64, int64, error) { return 0, 0, ErrUnreachable }

func (f *faultyPD) GetTS(ctx context.Context) (int64, int64, error) {
	f.n.tso.Add(1)
	if f.down.Load() {
		return 0, 0, ErrUnreachable
	}
	if err := f.tsWithFaults(ctx); err != nil {
		return 0, 0, err
	}
	return f.Client.GetTS(ctx)
}

func (f *faultyPD) GetTSAsync(ctx context.Context) pd.TSFuture {
	f.n.tso.Add(1)
	if f.down.Load() {
		return failedTS{}
	}
	return slowTS{ctx: ctx, pd: f, inner: f.Client.GetTSAsync(ctx)}
}

func (f *faultyPD) GetLocalTS(ctx context.Context, dc string) (int64, int64, error) {
	f.n.tso.Add(1)
	if f.down.Load() {
		return 0, 0, ErrUnreachable
	}
	if err := f.tsWithFaults(ctx); err != nil {
		return 0, 0, err
	}
	return f.Client.GetLocalTS(ctx, dc)
}

func (f *faultyPD) GetLocalTSAsync(ctx context.Context, dc string) pd.TSFuture {
	f.n.tso.Add(1)
	if f.down.Load() {
		return failedTS{}
	}
	return slowTS{ctx: ctx, pd: f, inner: f.Client.GetLocalTSAsync(ctx, dc)}
}

func (f *faultyPD) Close() {}

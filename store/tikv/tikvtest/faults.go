package tikvtest

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pingcap/kvproto/pkg/errorpb"
	"github.com/tikv/client-go/v2/tikvrpc"
	pd "github.com/tikv/pd/client"

	"downloader/clock"
)

// What an injected fault looks like to client-go, in turn (Faults.Kinds).
type FaultKind int

const (
	// FaultRegionError answers NotLeader with no leader known (a leader election):
	// client-go backs off a few milliseconds and retries.
	FaultRegionError FaultKind = iota
	// FaultServerBusy answers ServerIsBusy: client-go backs off 1-2 s (its tikvServerBusy
	// backoff) and retries, which usually outlasts an admission's deadline.
	FaultServerBusy
	// FaultTimeout sends nothing and fails after Faults.TimeoutDelay (a lost packet):
	// client-go backs off (tikvRPC, 100 ms) and retries.
	FaultTimeout
	// FaultUndetermined sends the request, lets the cluster apply it, and loses the
	// answer: a commit whose outcome the client does not know.
	FaultUndetermined
)

// ErrInjectedTimeout and ErrInjectedLostAnswer are the errors of FaultTimeout and
// FaultUndetermined.
var (
	ErrInjectedTimeout    = errors.New("tikvtest: request timed out (injected)")
	ErrInjectedLostAnswer = errors.New("tikvtest: answer lost after the request was applied (injected)")
)

// Faults is what a client's network to the cluster does to its requests (Client.SetFaults).
// The zero value does nothing.
type Faults struct {
	// Latency ± Jitter (uniform) is added before every TiKV request and PD timestamp
	// request, as one network round trip; a request whose context ends meanwhile fails.
	Latency, Jitter time.Duration
	// FaultRate is the fraction of TiKV requests (those Match selects) that fail with one
	// of Kinds, taken in turn (default: every kind).
	FaultRate float64
	Kinds     []FaultKind
	// TimeoutDelay is how long a FaultTimeout request takes to fail (default 20 ms).
	TimeoutDelay time.Duration
	// Match selects the TiKV requests FaultRate applies to (nil: all), e.g. Touches.
	Match func(*tikvrpc.Request) bool
	// Seed makes the choice of failing requests repeatable.
	Seed uint64
	// Block, when not nil, holds the requests Match selects until it is closed (or their
	// context ends): a stalled region, or a slow scan, for as long as the test wants.
	Block <-chan struct{}
}

// injector applies one client's Faults.
type injector struct {
	mu     sync.Mutex
	f      Faults
	rng    *rand.Rand
	next   int          // next kind, in turn
	pdDown atomic.Bool  // PD outage: timestamps fail
	cut    atomic.Value // func(*tikvrpc.Request) bool: requests that fail at once (partition)
	faults atomic.Int64 // injected faults so far
}

func newInjector() *injector {
	return &injector{rng: rand.New(rand.NewPCG(1, 2))}
}

func (in *injector) set(f Faults) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(f.Kinds) == 0 {
		f.Kinds = []FaultKind{FaultRegionError, FaultServerBusy, FaultTimeout, FaultUndetermined}
	}
	if f.TimeoutDelay <= 0 {
		f.TimeoutDelay = 20 * time.Millisecond
	}
	in.f, in.rng, in.next = f, rand.New(rand.NewPCG(f.Seed, 0x5eed)), 0
}

// delay returns the latency of one round trip now.
func (in *injector) delay() time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	d := in.f.Latency
	if in.f.Jitter > 0 {
		d += time.Duration(in.rng.Int64N(int64(2*in.f.Jitter)+1)) - in.f.Jitter
	}
	return max(d, 0)
}

// fault returns the fault to inject into req, if any.
func (in *injector) fault(req *tikvrpc.Request) (FaultKind, time.Duration, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.f.FaultRate <= 0 || (in.f.Match != nil && !in.f.Match(req)) || in.rng.Float64() >= in.f.FaultRate {
		return 0, 0, false
	}
	k := in.f.Kinds[in.next%len(in.f.Kinds)]
	in.next++
	in.faults.Add(1)
	return k, in.f.TimeoutDelay, true
}

// block returns the channel req must wait on, if any.
func (in *injector) block(req *tikvrpc.Request) <-chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.f.Block == nil || (in.f.Match != nil && !in.f.Match(req)) {
		return nil
	}
	return in.f.Block
}

func (in *injector) isCut(req *tikvrpc.Request) bool {
	cut, _ := in.cut.Load().(func(*tikvrpc.Request) bool)
	return cut != nil && cut(req)
}

// wait is one network delay: a slow network, not a test waiting for something.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetFaults replaces what this client's network does to its requests.
func (cl *Client) SetFaults(f Faults) { cl.inj.set(f) }

// SetPDDown makes this client's PD timestamp requests fail (true) or work again: a PD
// outage (or a partition from PD only). TiKV requests still work.
func (cl *Client) SetPDDown(down bool) { cl.inj.pdDown.Store(down) }

// Cut makes the TiKV requests that match fail at once with ErrUnreachable, until Cut(nil):
// a partial partition, e.g. from the region that holds some keys (Touches).
func (cl *Client) Cut(match func(*tikvrpc.Request) bool) { cl.inj.cut.Store(match) }

// InjectedFaultCount is how many requests of this client failed by FaultRate so far.
func (cl *Client) InjectedFaultCount() int64 { return cl.inj.faults.Load() }

// Touches selects the requests that read or write a key starting with prefix.
func Touches(prefix []byte) func(*tikvrpc.Request) bool {
	has := func(k []byte) bool { return bytes.HasPrefix(k, prefix) }
	return func(req *tikvrpc.Request) bool {
		switch req.Type {
		case tikvrpc.CmdGet:
			return has(req.Get().GetKey())
		case tikvrpc.CmdBatchGet:
			for _, k := range req.BatchGet().GetKeys() {
				if has(k) {
					return true
				}
			}
		case tikvrpc.CmdScan:
			s := req.Scan()
			return has(s.GetStartKey()) || (bytes.Compare(s.GetStartKey(), prefix) < 0 &&
				(len(s.GetEndKey()) == 0 || bytes.Compare(s.GetEndKey(), prefix) > 0))
		case tikvrpc.CmdPrewrite:
			for _, m := range req.Prewrite().GetMutations() {
				if has(m.GetKey()) {
					return true
				}
			}
		case tikvrpc.CmdCommit:
			for _, k := range req.Commit().GetKeys() {
				if has(k) {
					return true
				}
			}
		}
		return false
	}
}

// sendWithFaults is faultyRPC.SendRequest after the counting and the down switch.
func (f *faultyRPC) sendWithFaults(ctx context.Context, addr string, req *tikvrpc.Request, timeout time.Duration) (*tikvrpc.Response, error) {
	if f.inj.isCut(req) {
		return nil, ErrUnreachable
	}
	if err := wait(ctx, f.inj.delay()); err != nil {
		return nil, err
	}
	if block := f.inj.block(req); block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	kind, delay, ok := f.inj.fault(req)
	if !ok {
		return f.serve(ctx, addr, req, timeout)
	}
	switch kind {
	case FaultRegionError:
		return tikvrpc.GenRegionErrorResp(req, &errorpb.Error{Message: "injected", NotLeader: &errorpb.NotLeader{RegionId: req.RegionId}})
	case FaultServerBusy:
		return tikvrpc.GenRegionErrorResp(req, &errorpb.Error{Message: "injected", ServerIsBusy: &errorpb.ServerIsBusy{Reason: "injected"}})
	case FaultTimeout:
		if err := wait(ctx, delay); err != nil {
			return nil, err
		}
		return nil, ErrInjectedTimeout
	default: // FaultUndetermined
		if _, err := f.serve(ctx, addr, req, timeout); err != nil {
			return nil, err
		}
		return nil, ErrInjectedLostAnswer
	}
}

// serve has the mock cluster serve req and returns its answer, or ctx's error as soon as
// ctx ends, as a real client's RPC does (gRPC returns at the caller's deadline while TiKV
// goes on with the request, whose answer is then lost). The mock serves each request to
// its end under one store-wide lock, checking ctx only on entry: called directly, a caller
// queued behind a long scan would wait past its own deadline for as long as the lock is
// taken, which no real cluster does to it. The request still runs to its end (it may be
// applied); the cluster closes only after it.
func (f *faultyRPC) serve(ctx context.Context, addr string, req *tikvrpc.Request, timeout time.Duration) (*tikvrpc.Response, error) {
	if ctx.Done() == nil {
		return f.Client.SendRequest(ctx, addr, req, timeout)
	}
	type answer struct {
		resp *tikvrpc.Response
		err  error
	}
	got := make(chan answer, 1)
	f.serving.add(1)
	go func() {
		defer f.serving.add(-1)
		resp, err := f.Client.SendRequest(ctx, addr, req, timeout)
		got <- answer{resp, err}
	}()
	select {
	case a := <-got:
		return a.resp, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// tsWithFaults is the PD side: the latency of one round trip, and the outage switch.
func (f *faultyPD) tsWithFaults(ctx context.Context) error {
	if f.inj.pdDown.Load() {
		return ErrUnreachable
	}
	return wait(ctx, f.inj.delay())
}

// slowTS is a timestamp future that arrives after one round trip.
type slowTS struct {
	ctx   context.Context
	pd    *faultyPD
	inner pd.TSFuture
}

func (s slowTS) Wait() (int64, int64, error) {
	if err := s.pd.tsWithFaults(s.ctx); err != nil {
		return 0, 0, err
	}
	return s.inner.Wait()
}

// SkewedClock is a clock that reads Offset ahead of its base (behind when negative): an
// instance whose clock is off. Timers run on the base clock (durations are not skewed).
// Safe for concurrent use.
type SkewedClock struct {
	Base   clock.Clock
	offset atomic.Int64
}

// NewSkewedClock returns base read offset ahead.
func NewSkewedClock(base clock.Clock, offset time.Duration) *SkewedClock {
	c := &SkewedClock{Base: base}
	c.offset.Store(int64(offset))
	return c
}

// SetOffset changes the offset (a clock step).
func (c *SkewedClock) SetOffset(d time.Duration) { c.offset.Store(int64(d)) }

func (c *SkewedClock) Now() time.Time { return c.Base.Now().Add(time.Duration(c.offset.Load())) }

func (c *SkewedClock) NewTimer(d time.Duration) clock.Timer { return c.Base.NewTimer(d) }

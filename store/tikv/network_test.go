package tikv

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/tikv/client-go/v2/tikvrpc"
	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/engine"
	"downloader/internal/testkit"
	"downloader/limiter"
	"downloader/store/tikv/tikvtest"
)

// The runtime under the network's faults, one hole at a time, on a fake clock (the
// three-instance tests with real traffic are in cluster_net_test.go).

// TestFaultRestartUnderFixedInstanceID: a process restarted under the same --instance-id
// while its predecessor's last request was admitted and its wire moment not written back.
// The new process must respect that entry (it may still go on the wire) until it expires.
func TestFaultRestartUnderFixedInstanceID(t *testing.T) {
	rg := newRig(t)
	x1 := rg.instance("x", 8)
	const d, I = "restart.example", time.Second
	rg.clk.Advance(time.Hour)
	if err := x1.rt.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	t0 := rg.clk.Now()
	if tk, _ := x1.admit(t, ask(d, I, t0)); tk == nil { // expires at t0 + 10 s + 2 s
		t.Fatal("x refused")
	}
	x1.client.SetDown(true) // the process dies: no write-back, no heartbeat
	rg.clk.Advance(6 * time.Second)
	x2 := rg.instance("x", 8) // its predecessor's heartbeat has expired
	if tk, wait := x2.admit(t, ask(d, I, rg.clk.Now())); tk != nil {
		t.Fatalf("the restarted process admitted %s while its predecessor's request may still go on the wire (wait %v)", d, wait)
	}
	st, err := x2.rt.Domain(t.Context(), d)
	if err != nil || len(st.InFlightRequests) != 1 {
		t.Fatalf("the predecessor's entry: %+v, %v", st, err)
	}
	// The entry expires at t0+12s (+ the skew allowance: another process wrote it); the
	// request counts as sent then, so the domain opens one interval later.
	expiry := t0.Add(12*time.Second + 50*time.Millisecond)
	rg.clk.Set(expiry.Add(I - time.Millisecond))
	if tk, _ := x2.admit(t, ask(d, I, rg.clk.Now())); tk != nil {
		t.Fatal("admitted before the predecessor's expired request was an interval old")
	}
	rg.clk.Set(expiry.Add(I))
	tk, _ := x2.admit(t, ask(d, I, rg.clk.Now()))
	if tk == nil {
		t.Fatal("refused after the predecessor's request expired an interval ago")
	}
	// Its write-back removes its own entry only.
	tk.Done(t.Context(), rg.clk.Now())
	if st, _ := x2.rt.Domain(t.Context(), d); len(st.InFlightRequests) != 0 {
		t.Errorf("after Done: %+v", st.InFlightRequests)
	}
}

// TestFaultTwoLiveProcessesOneInstanceID: a second process started with the id of a live
// one is refused: they would share one heartbeat record and one share of the cap.
func TestFaultTwoLiveProcessesOneInstanceID(t *testing.T) {
	rg := newRig(t)
	x1 := rg.instance("x", 8)
	s, _ := openStore(t, rg.cluster)
	gate := limiter.NewGate(8, 16)
	x2, err := NewRuntime(s, RuntimeConfig{Share: engine.EvenShare, InstanceID: "x", Clock: rg.clk, Gate: gate, MaxConcurrentCount: 8,
		MaxClockSkew: 50 * time.Millisecond, AdmitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	x2.refNow = x1.rt.refNow
	if err := x2.Heartbeat(t.Context()); err == nil {
		t.Fatal("a second live process with the same instance id registered")
	} else if !isInstanceIDInUse(err) {
		t.Errorf("error = %v; want the id in use", err)
	}
	if tk, _, err := x2.Admit(t.Context(), ask("dup.example", 0, rg.clk.Now())); tk != nil || err == nil {
		t.Errorf("the refused process admitted a request: %v %v", tk, err)
	}
	// The first one goes on as before.
	rg.clk.Advance(time.Second)
	if err := x1.rt.Heartbeat(t.Context()); err != nil {
		t.Errorf("the first process's heartbeat: %v", err)
	}
}

// skewedInstance is an instance on the real clock read offset ahead, measured against the
// mock PD's TSO (which follows the real clock).
func skewedInstance(t *testing.T, c *tikvtest.Cluster, ref *clocktest.Fake, id string, offset time.Duration) *instance {
	t.Helper()
	s, cl := openStore(t, c)
	gate := limiter.NewGate(8, 16)
	rt, err := NewRuntime(s, RuntimeConfig{Share: engine.EvenShare, InstanceID: id, Clock: tikvtest.NewSkewedClock(ref, offset), Gate: gate,
		MaxConcurrentCount: 8, MaxClockSkew: 50 * time.Millisecond, AdmitTimeout: 2 * time.Second, TSOLag: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rt.refNow = func(context.Context) (time.Time, error) { return ref.Now(), nil }
	if err := rt.Heartbeat(t.Context()); err != nil && !isClockSkewed(err) {
		t.Fatal(err)
	}
	return &instance{rt: rt, store: s, client: cl, gate: gate}
}

// seedPastLoss writes the table's loss marker an hour in the past, so that no domain of a
// fresh table waits for it (a table found without one would mark its loss now).
func seedPastLoss(tb testing.TB, s *Store) {
	tb.Helper()
	if err := s.update(context.Background(), func(txn *transaction.KVTxn) error {
		b, _ := json.Marshal(lossRecord{LossAt: time.Now().Add(-time.Hour).UTC()})
		return txn.Set([]byte(lossKey), b)
	}); err != nil {
		tb.Fatal(err)
	}
}

// TestSkewBeyondAllowanceFailsClosed: an instance whose clock is off PD's by more than
// half the allowance (two such instances may differ by the whole allowance) stops
// admitting: it would admit early by the excess. Within it, admission goes on.
func TestSkewBeyondAllowanceFailsClosed(t *testing.T) {
	c := tikvtest.NewCluster(t)
	// PD's clock is ref, a fake one: the instances' offsets from it are exact, and "inside
	// x's interval" does not depend on how fast the machine runs the calls between.
	ref := clocktest.NewFake(time.Now())
	x := skewedInstance(t, c, ref, "x", 0)
	seedPastLoss(t, x.store) // so that the first request is not held by the marker
	within := skewedInstance(t, c, ref, "within", 10*time.Millisecond)
	if _, err := within.rt.fence(within.rt.clk.Now()); err != nil {
		t.Fatalf("10 ms off, within the allowance: %v", err)
	}
	beyond := skewedInstance(t, c, ref, "beyond", 300*time.Millisecond)
	const d, I = "skew-fence.example", 100 * time.Millisecond
	now := x.rt.clk.Now()
	tk, _ := x.admit(t, ask(d, I, now))
	if tk == nil {
		t.Fatal("x refused")
	}
	tk.Done(t.Context(), now) // on the wire at its slot
	// Right after: both are inside x's interval.
	if tk, wait, err := within.rt.Admit(t.Context(), ask(d, I, within.rt.clk.Now())); tk != nil || err != nil || wait <= 0 {
		t.Errorf("within the allowance, inside the interval: %v %v %v; want a refusal", tk, wait, err)
	}
	tk, wait, err := beyond.rt.Admit(t.Context(), ask(d, I, beyond.rt.clk.Now()))
	if tk != nil {
		t.Fatalf("an instance 300 ms ahead admitted %v after x's request (interval %v): early at the origin", time.Since(now), I)
	}
	if downloader.ErrorCode(err) != downloader.EUNAVAILABLE || !isClockSkewed(err) {
		t.Errorf("beyond the allowance: %v %v; want EUNAVAILABLE, clock skewed", wait, err)
	}
	if got := beyond.rt.FenceState(beyond.rt.clk.Now()); !got.IsFenced || got.FenceReason != downloader.FenceClockSkewed {
		t.Errorf("beyond the allowance, its own fence state: %+v; want fenced, clock_skewed", got)
	}
	list, err := x.rt.Instances(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if want := in.InstanceID == "beyond"; in.IsFenced != want {
			t.Errorf("%s: is_fenced %v (%q); want %v", in.InstanceID, in.IsFenced, in.FenceReason, want)
		}
	}
	// The clock is fixed: the next heartbeats lift the fence.
	beyond.rt.clk.(*tikvtest.SkewedClock).SetOffset(0)
	beyond.rt.resetClockSamples()
	for range 10 {
		if err := beyond.rt.Heartbeat(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := beyond.rt.fence(beyond.rt.clk.Now()); err == nil {
			break
		}
	}
	if _, _, err := beyond.rt.Admit(t.Context(), ask("other.example", 0, beyond.rt.clk.Now())); err != nil {
		t.Errorf("after the clock was fixed: %v", err)
	}
	if got := beyond.rt.FenceState(beyond.rt.clk.Now()); got.IsFenced {
		t.Errorf("after the clock was fixed, its own fence state: %+v; want not fenced", got)
	}
}

// TestSkewAllowanceMismatch: instances running with different allowances use the largest
// one among the live instances.
func TestSkewAllowanceMismatch(t *testing.T) {
	rg := newRig(t)
	x := rg.instance("x", 8)
	y := rg.instanceWith("y", 8, func(c *RuntimeConfig) { c.MaxClockSkew = 200 * time.Millisecond })
	if err := x.rt.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := x.rt.skew(); got != 200*time.Millisecond {
		t.Errorf("x's allowance with y at 200ms = %v; want 200ms", got)
	}
	if got := y.rt.skew(); got != 200*time.Millisecond {
		t.Errorf("y's allowance = %v", got)
	}
}

// beatAll sends a heartbeat from every instance whose client is up; ok reports which
// succeeded.
func beatAll(t *testing.T, ins ...*instance) {
	t.Helper()
	for _, in := range ins {
		_ = in.rt.Heartbeat(t.Context())
	}
}

// TestPartitionHeartbeatLate: an instance whose heartbeats fail while its admissions
// still succeed (a partial partition, or heartbeats starved by something slow). The
// others drop it when its heartbeat expires; by then it must admit nothing new, and they
// must not use its share while its requests may still be running.
func TestPartitionHeartbeatLate(t *testing.T) {
	rg := newRig(t)
	// A request timeout of 3 s: x's claim ends 5 s (TTL) + 3 s + 2 s (slack) after its last
	// heartbeat.
	short := func(c *RuntimeConfig) { c.DefaultTimeout = 3 * time.Second }
	x := rg.instanceWith("x", 10, short)
	y := rg.instanceWith("y", 10, short)
	rg.clk.Advance(time.Hour)
	beatAll(t, x, y)
	rg.clk.Advance(2 * time.Second)
	beatAll(t, x, y)
	if x.gate.Capacity() != 5 || y.gate.Capacity() != 5 {
		t.Fatalf("shares %d %d; want 5 5", x.gate.Capacity(), y.gate.Capacity())
	}
	lastBeat := rg.clk.Now()
	// The writes of x's heartbeat fail (its reads of the others would too, but client-go's
	// scanner retries for 20 s whatever the context: the fence must not depend on the
	// heartbeat failing fast).
	writesOfX := tikvtest.Touches([]byte(instancePrefix + "x"))
	x.client.Cut(func(req *tikvrpc.Request) bool { return req.Type == tikvrpc.CmdPrewrite && writesOfX(req) })
	admits := func() bool {
		tk, _, err := x.rt.Admit(t.Context(), ask("late.example", 0, rg.clk.Now()))
		if tk != nil {
			tk.Done(t.Context(), rg.clk.Now())
		}
		return tk != nil && err == nil
	}
	for i := range 13 {
		rg.clk.Advance(time.Second)
		// x's failing heartbeats give up after 100 ms; its admissions and y's heartbeats,
		// which work, have their whole timeout whatever the machine's load.
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		_ = x.rt.Heartbeat(ctx)
		cancel()
		beatAll(t, y)
		xAdmits := admits()
		sum := y.gate.Capacity()
		if xAdmits {
			sum += x.gate.Capacity()
		} else {
			sum += x.gate.InFlight()
		}
		if sum > 10 {
			t.Fatalf("%v after x's last heartbeat: y's share %d while x admits with %d: the cluster exceeds the cap of 10",
				rg.clk.Now().Sub(lastBeat), y.gate.Capacity(), x.gate.Capacity())
		}
		if i < 3 && !xAdmits {
			t.Errorf("x stopped admitting %v after its last heartbeat, within its TTL", rg.clk.Now().Sub(lastBeat))
		}
	}
	if y.gate.Capacity() != 10 {
		t.Errorf("y's share once x's requests must have ended = %d; want 10", y.gate.Capacity())
	}
	// x reaches its heartbeat key again: it rejoins and the shares are split again.
	x.client.Cut(nil)
	for range 4 {
		rg.clk.Advance(time.Second)
		beatAll(t, x, y)
	}
	if x.gate.Capacity()+y.gate.Capacity() > 10 || !admits() {
		t.Errorf("after rejoining: shares %d %d, admits %v", x.gate.Capacity(), y.gate.Capacity(), admits())
	}
}

// TestPartitionJoinWaitsForInFlight: a joining instance takes its share only as the others'
// requests in flight drain below their new shares: the sum of what each instance may have
// in flight never exceeds the cap.
func TestPartitionJoinWaitsForInFlight(t *testing.T) {
	rg := newRig(t)
	x, y := rg.instance("x", 10), rg.instance("y", 10)
	rg.clk.Advance(2 * time.Second)
	beatAll(t, x, y)
	for range 5 { // x runs its whole share
		if !x.gate.TryAcquire() {
			t.Fatal("x's gate full")
		}
	}
	z := rg.instance("z", 10)
	bound := func(in *instance) int { return max(in.gate.Capacity(), in.gate.InFlight()) }
	for i := range 6 {
		rg.clk.Advance(time.Second)
		beatAll(t, x, y, z)
		if sum := bound(x) + bound(y) + bound(z); sum > 10 {
			t.Fatalf("beat %d: x %d/%d, y %d, z %d: up to %d in flight under a cap of 10", i, x.gate.InFlight(),
				x.gate.Capacity(), bound(y), z.gate.Capacity(), sum)
		}
		if i == 3 {
			x.gate.Release() // x's requests end
			x.gate.Release()
		}
	}
	if z.gate.Capacity() != 3 {
		t.Errorf("z's share once x drained = %d; want 3", z.gate.Capacity())
	}
	for x.gate.InFlight() > 0 {
		x.gate.Release()
	}
}

// TestLatencySlowSweepKeepsHeartbeats: a sweep that takes long (hundreds of thousands of
// domains, a slow region) must not delay the heartbeats.
func TestLatencySlowSweepKeepsHeartbeats(t *testing.T) {
	rg := newRig(t)
	x := rg.instanceWith("x", 8, func(c *RuntimeConfig) { c.SweepInterval = time.Second })
	block := make(chan struct{})
	var once sync.Once
	reached := make(chan struct{})
	x.client.SetFaults(tikvtest.Faults{Block: block, Match: func(req *tikvrpc.Request) bool {
		if req.Type == tikvrpc.CmdScan && bytes.Equal(req.Scan().GetStartKey(), []byte(domainRuntimePrefix)) {
			once.Do(func() { close(reached) })
			return true
		}
		return false
	}})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = x.rt.Run(ctx) }()
	defer func() {
		cancel()
		close(block)
		<-done
	}()
	beatAt := func() time.Time {
		v, ok, err := x.store.get(t.Context(), []byte(instancePrefix+"x"))
		var rec instanceRecord
		if err != nil || !ok || json.Unmarshal(v, &rec) != nil {
			t.Fatalf("instance record: %s %v %v", v, ok, err)
		}
		return rec.HeartbeatAt
	}
	// Run's heartbeat timer and the sweep's, both: advancing when only one of the two
	// goroutines had set its timer would leave the other's due a second later, and nothing
	// below advances that far.
	testkit.WaitFor(t, clusterWait, "Run's timers", func() bool { return rg.clk.TimerCount() >= 2 })
	rg.clk.Advance(time.Second)
	select {
	case <-reached:
	case <-time.After(clusterWait):
		t.Fatal("the sweep never started")
	}
	for i := range 3 {
		want := rg.clk.Now()
		testkit.WaitFor(t, clusterWait, "a heartbeat while the sweep is stuck", func() bool {
			if !beatAt().Before(want) {
				return true
			}
			if rg.clk.TimerCount() >= 1 {
				rg.clk.Advance(0) // let a due timer fire
			}
			return false
		})
		if i < 2 {
			testkit.WaitFor(t, clusterWait, "the next heartbeat timer", func() bool { return rg.clk.TimerCount() >= 1 })
			rg.clk.Advance(time.Second)
		}
	}
}

// TestFaultPDOutage: with PD unreachable (no timestamps) an instance cannot admit: it fails
// closed at once, and admits again when PD is back.
//
// The instance keeps the rig's AdmitTimeout (2 s): a 200 ms one also bounded every
// heartbeat, and the registration's, with PD up, met it on a loaded machine (load ≈ 30).
// The calls with PD down are given their caller's 200 ms instead; the heartbeat returns
// at it, the admission at its batch's AdmitTimeout (a batch decides its other callers'
// admissions too: runAdmitBatch).
func TestFaultPDOutage(t *testing.T) {
	rg := newRig(t)
	x := rg.instance("x", 8)
	rg.clk.Advance(time.Hour)
	x.renew(t)
	x.client.SetPDDown(true)
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	if tk, _, err := x.rt.Admit(short(), ask("pd.example", 0, rg.clk.Now())); tk != nil || downloader.ErrorCode(err) != downloader.EUNAVAILABLE {
		t.Fatalf("Admit with PD down = %v, %v; want EUNAVAILABLE", tk, err)
	}
	if err := x.rt.Heartbeat(short()); downloader.ErrorCode(err) != downloader.EUNAVAILABLE {
		t.Errorf("Heartbeat with PD down = %v", err)
	}
	x.client.SetPDDown(false)
	if tk, _ := x.admit(t, ask("pd.example", 0, rg.clk.Now())); tk == nil {
		t.Error("refused after PD came back")
	}
}

// TestFenceState: what the metrics and the console read of this instance's own fence,
// from local state: not registered before its first heartbeat, free within its lease,
// heartbeat_late from the lease's end until a heartbeat commits again, and
// instance_id_taken_over for good once another process took its id.
func TestFenceState(t *testing.T) {
	rg := newRig(t)
	rg.clk.Advance(time.Hour)
	s, _ := openStore(t, rg.cluster)
	fresh, err := NewRuntime(s, RuntimeConfig{Share: engine.EvenShare, InstanceID: "fresh", Clock: rg.clk, Gate: limiter.NewGate(8, 16),
		MaxConcurrentCount: 8, MaxClockSkew: 50 * time.Millisecond, AdmitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := fresh.FenceState(rg.clk.Now()); !got.IsFenced || got.FenceReason != downloader.FenceNotRegistered {
		t.Errorf("before the first heartbeat: %+v; want fenced, not_registered", got)
	}

	x1 := rg.instance("x", 8) // registered, lease 5 s
	if got := x1.rt.FenceState(rg.clk.Now()); got.IsFenced || got.FenceReason != "" {
		t.Errorf("within the lease: %+v; want not fenced", got)
	}
	rg.clk.Advance(5*time.Second - time.Millisecond)
	if got := x1.rt.FenceState(rg.clk.Now()); got.IsFenced {
		t.Errorf("1 ms before the lease ends: %+v; want not fenced", got)
	}
	rg.clk.Advance(time.Millisecond)
	if got := x1.rt.FenceState(rg.clk.Now()); !got.IsFenced || got.FenceReason != downloader.FenceHeartbeatLate {
		t.Errorf("at the lease's end: %+v; want fenced, heartbeat_late", got)
	}
	if err := x1.rt.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := x1.rt.FenceState(rg.clk.Now()); got.IsFenced {
		t.Errorf("after a heartbeat committed: %+v; want not fenced", got)
	}

	// Cut off past its lease, its id taken over by a new process: fenced for good.
	x1.client.SetDown(true)
	rg.clk.Advance(6 * time.Second)
	rg.instance("x", 8)
	x1.client.SetDown(false)
	if err := x1.rt.Heartbeat(t.Context()); !isInstanceIDInUse(err) {
		t.Fatalf("heartbeat of the superseded process: %v; want the id in use", err)
	}
	if got := x1.rt.FenceState(rg.clk.Now()); !got.IsFenced || got.FenceReason != downloader.FenceInstanceIDTakenOver {
		t.Errorf("after the take-over: %+v; want fenced, instance_id_taken_over", got)
	}
}

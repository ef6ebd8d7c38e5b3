package tikv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/engine"
	"downloader/limiter"
	"downloader/store/keys"
	"downloader/store/tikv/tikvtest"
)

// rig is one mock cluster with instances sharing a fake clock.
type rig struct {
	t       *testing.T
	cluster *tikvtest.Cluster
	clk     *clocktest.Fake
}

func newRig(t *testing.T) *rig {
	return &rig{t: t, cluster: tikvtest.NewCluster(t), clk: clocktest.NewFake(time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC))}
}

// instance is one runtime with its gate and client.
type instance struct {
	rt     *Runtime
	store  *Store
	client *tikvtest.Client
	gate   *limiter.Gate
}

func (rg *rig) instance(id string, capacity int) *instance {
	rg.t.Helper()
	return rg.instanceWith(id, capacity, nil)
}

// instanceWith is instance with its configuration changed by edit first.
func (rg *rig) instanceWith(id string, capacity int, edit func(*RuntimeConfig)) *instance {
	rg.t.Helper()
	s, cl := openStore(rg.t, rg.cluster)
	gate := limiter.NewGate(capacity, 16)
	cfg := RuntimeConfig{Share: engine.EvenShare, InstanceID: id, Clock: rg.clk, Gate: gate, MaxConcurrentCount: capacity,
		HeartbeatInterval: time.Second, InstanceTTL: 5 * time.Second, MaxClockSkew: 50 * time.Millisecond,
		AdmitTimeout: 2 * time.Second, ExpirySlack: 2 * time.Second, TSOLag: time.Nanosecond}
	if edit != nil {
		edit(&cfg)
	}
	rt, err := NewRuntime(s, cfg)
	if err != nil {
		rg.t.Fatal(err)
	}
	// PD's clock is the rig's: the instances' clocks are in sync with it.
	rt.refNow = func(context.Context) (time.Time, error) { return rg.clk.Now(), nil }
	// Register, which also writes the loss marker of a fresh table at the rig's clock.
	if err := rt.Heartbeat(rg.t.Context()); err != nil {
		rg.t.Fatal(err)
	}
	return &instance{rt: rt, store: s, client: cl, gate: gate}
}

// ask is an admission request for tests: B-style (no reservation) unless reserve.
func ask(domain string, interval time.Duration, now time.Time) downloader.SharedAdmit {
	return downloader.SharedAdmit{Domain: domain, MinInterval: interval, IntervalSource: downloader.IntervalSourceRequest,
		Entry: downloader.EntryRender, Now: now, Timeout: 10 * time.Second}
}

func (in *instance) admit(t *testing.T, a downloader.SharedAdmit) (downloader.SharedTicket, time.Duration) {
	t.Helper()
	in.renew(t)
	tk, wait, err := in.rt.Admit(t.Context(), a)
	if err != nil {
		t.Fatalf("%s: Admit(%s): %v", in.rt.InstanceID(), a.Domain, err)
	}
	return tk, wait
}

// renew sends a heartbeat when the instance's lease has ended, as Run would have while
// the test moved the clock (an instance whose TiKV is down stays fenced).
func (in *instance) renew(t *testing.T) {
	t.Helper()
	if _, err := in.rt.fence(in.rt.clk.Now()); err != nil {
		_ = in.rt.Heartbeat(t.Context())
	}
}

func TestRuntimeAdmission(t *testing.T) {
	rg := newRig(t)
	x, y := rg.instance("x", 8), rg.instance("y", 8)
	const d, I = "a.example", time.Second
	skew := 50 * time.Millisecond
	// A fresh table: the loss marker was written at the first heartbeat; the first
	// admission waits I from it (plus the skew allowance: no instance set it).
	t0 := rg.clk.Now()
	if tk, wait := x.admit(t, ask(d, I, t0)); tk != nil || wait != I+skew {
		t.Fatalf("first admission on a fresh table: ticket %v, wait %v; want a refusal for I+skew", tk, wait)
	}
	rg.clk.Advance(I + skew)
	t1 := rg.clk.Now()
	tk1, wait := x.admit(t, ask(d, I, t1))
	if tk1 == nil || wait != 0 {
		t.Fatalf("admission after the loss interval: %v %v", tk1, wait)
	}
	// Its own next request waits the interval from the slot, without the skew allowance.
	rg.clk.Advance(400 * time.Millisecond)
	if tk, wait := x.admit(t, ask(d, I, rg.clk.Now())); tk != nil || wait != 600*time.Millisecond {
		t.Fatalf("x again: %v %v; want a refusal for 600ms", tk, wait)
	}
	// Another instance, while x's request is in flight (its wire moment unknown): busy.
	rg.clk.Set(t1.Add(2 * I))
	if tk, wait := y.admit(t, ask(d, I, rg.clk.Now())); tk != nil || wait <= 0 {
		t.Fatalf("y while x's request is in flight: %v %v; want a refusal", tk, wait)
	}
	// x's request went on the wire 1.5 s after its slot (a slow handshake) and ended.
	tk1.Done(t.Context(), t1.Add(1500*time.Millisecond))
	rg.clk.Set(t1.Add(1500*time.Millisecond + I + skew - time.Millisecond))
	if tk, wait := y.admit(t, ask(d, I, rg.clk.Now())); tk != nil || wait != time.Millisecond {
		t.Fatalf("y 1ms before wire+I+skew: %v %v; want a refusal for 1ms", tk, wait)
	}
	rg.clk.Advance(time.Millisecond)
	tk2, _ := y.admit(t, ask(d, I, rg.clk.Now()))
	if tk2 == nil {
		t.Fatal("y at wire+I+skew: refused")
	}
	st, err := x.rt.Domain(t.Context(), d)
	if err != nil || st.InFlightCount != 1 || !st.LastRequestAt.Equal(rg.clk.Now()) || st.MinIntervalMs != 1000 || !st.IsStored {
		t.Errorf("Domain = %+v, %v", st, err)
	}
	tk2.Done(t.Context(), rg.clk.Now())
	if st, _ := x.rt.Domain(t.Context(), d); st.InFlightCount != 0 {
		t.Errorf("in_flight_count after the write-back = %d", st.InFlightCount)
	}
}

func TestRuntimeReserve(t *testing.T) {
	rg := newRig(t)
	x, y := rg.instance("x", 8), rg.instance("y", 8)
	const d, I = "b.example", 2 * time.Second
	rg.clk.Advance(time.Hour) // past the loss marker's interval
	x.admit(t, ask(d, time.Hour, rg.clk.Now().Add(-time.Hour)))
	rg.clk.Advance(time.Hour)
	tk, _ := x.admit(t, ask(d, I, rg.clk.Now()))
	tk.Done(t.Context(), rg.clk.Now())
	now := rg.clk.Now()
	a := ask(d, I, now)
	a.Reserve, a.Entry = true, downloader.EntryLease
	a.Deadline = now.Add(time.Second)
	if tk, wait := y.admit(t, a); tk != nil || wait != I+50*time.Millisecond {
		t.Fatalf("reservation past the deadline: %v %v", tk, wait)
	}
	a.Deadline = time.Time{}
	tk, delay := y.admit(t, a)
	if tk == nil || delay != I+50*time.Millisecond {
		t.Fatalf("reservation: %v %v; want a slot in I+skew", tk, delay)
	}
	// The reserved slot is taken: x's next slot is I after it.
	b := a
	b.Now = now.Add(time.Millisecond)
	if tk, wait := x.admit(t, b); tk != nil || wait <= 0 {
		t.Fatalf("x while y holds a reservation in flight: %v %v", tk, wait)
	}
	tk.Done(t.Context(), now.Add(delay)) // went out at its slot
	if tk, delay := x.admit(t, b); tk == nil || delay != 2*I+2*50*time.Millisecond-time.Millisecond {
		t.Fatalf("x after y's reservation ended: %v %v", tk, delay)
	}
}

// TestRuntimeDeadInstance: an instance that stops without a word: its in-flight request
// stops counting when its heartbeat expires and stops blocking the domain when the
// request's own bound passes.
func TestRuntimeDeadInstance(t *testing.T) {
	rg := newRig(t)
	x, y := rg.instance("x", 8), rg.instance("y", 8)
	const d = "c.example"
	rg.clk.Advance(time.Hour)
	for _, in := range []*instance{x, y} {
		if err := in.rt.Heartbeat(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if tk, _ := x.admit(t, ask(d, 0, rg.clk.Now())); tk == nil {
		t.Fatal("x refused")
	}
	start := rg.clk.Now()
	x.client.SetDown(true) // x is gone: no heartbeat, no write-back
	if st, _ := y.rt.Domain(t.Context(), d); st.InFlightCount != 1 {
		t.Fatalf("in_flight_count = %d; want 1", st.InFlightCount)
	}
	rg.clk.Set(start.Add(6 * time.Second)) // past x's heartbeat TTL
	if st, _ := y.rt.Domain(t.Context(), d); st.InFlightCount != 0 {
		t.Errorf("in_flight_count after x's heartbeat expired = %d; want 0", st.InFlightCount)
	}
	if tk, _ := y.admit(t, ask(d, 0, rg.clk.Now())); tk != nil {
		t.Fatal("y admitted while x's request may still go on the wire")
	}
	// 10 s timeout + 2 s slack + 50 ms skew after the slot.
	rg.clk.Set(start.Add(12*time.Second + 50*time.Millisecond))
	if tk, wait := y.admit(t, ask(d, 0, rg.clk.Now())); tk == nil {
		t.Fatalf("y refused after x's request expired (wait %v)", wait)
	}
}

// TestRuntimeLoss: losing downloader:domain_runtime makes every domain wait one interval
// from the moment the loss is found.
func TestRuntimeLoss(t *testing.T) {
	rg := newRig(t)
	x := rg.instance("x", 8)
	const I = 10 * time.Second
	rg.clk.Advance(time.Hour)
	tk, _ := x.admit(t, ask("old.example", I, rg.clk.Now().Add(-time.Hour)))
	if tk == nil {
		t.Fatal("refused")
	}
	tk.Done(t.Context(), rg.clk.Now().Add(-time.Hour))
	rg.clk.Advance(time.Hour)
	if _, err := x.client.KV.DeleteRange(t.Context(), []byte(domainRuntimePrefix), keys.PrefixEnd(domainRuntimePrefix), 1); err != nil {
		t.Fatal(err)
	}
	lost := rg.clk.Now()
	for _, d := range []string{"old.example", "never-seen.example"} {
		if tk, wait := x.admit(t, ask(d, I, lost)); tk != nil || wait != I+50*time.Millisecond {
			t.Errorf("%s right after the loss: %v %v; want a refusal for one interval (+skew)", d, tk, wait)
		}
	}
	rg.clk.Set(lost.Add(I + 50*time.Millisecond))
	if tk, _ := x.admit(t, ask("old.example", I, rg.clk.Now())); tk == nil {
		t.Error("refused one interval after the loss")
	}
}

func TestRuntimeClockSkewAllowance(t *testing.T) {
	rg := newRig(t)
	x, y := rg.instance("x", 8), rg.instance("y", 8)
	const d, I = "skew.example", 500 * time.Millisecond
	rg.clk.Advance(time.Hour)
	tk, _ := x.admit(t, ask(d, I, rg.clk.Now()))
	wire := rg.clk.Now().Add(3 * time.Millisecond)
	tk.Done(t.Context(), wire)
	for _, tc := range []struct {
		in    *instance
		after time.Duration
		ok    bool
	}{
		{y, I + 49*time.Millisecond, false}, // another clock: I + skew
		{y, I + 50*time.Millisecond, true},
	} {
		rg.clk.Set(wire.Add(tc.after))
		tk, wait := tc.in.admit(t, ask(d, I, rg.clk.Now()))
		if (tk != nil) != tc.ok {
			t.Errorf("%s at wire+%v: admitted %v (wait %v); want %v", tc.in.rt.InstanceID(), tc.after, tk != nil, wait, tc.ok)
		}
	}
}

func TestRuntimeCapShare(t *testing.T) {
	rg := newRig(t)
	ins := []*instance{rg.instance("a", 10), rg.instance("b", 10), rg.instance("c", 10)}
	beat := func() {
		t.Helper()
		for _, in := range ins {
			if in.client == nil {
				continue
			}
			if err := in.rt.Heartbeat(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	shares := func() string {
		s := ""
		for _, in := range ins {
			s += fmt.Sprint(in.gate.Capacity(), " ")
		}
		return s
	}
	if got := shares(); got != "0 0 0 " {
		t.Errorf("shares while joining = %s; want none yet", got)
	}
	rg.clk.Advance(2 * time.Second)
	beat()
	if got := shares(); got != "4 3 3 " {
		t.Errorf("shares of 10 over 3 = %s; want 4 3 3", got)
	}
	// The cap changed online through b: b applies it at once, the others at their next beat.
	if err := ins[1].store.SaveSettings(t.Context(), downloader.Settings{MaxConcurrentCount: 5}); err != nil {
		t.Fatal(err)
	}
	ins[1].rt.ApplyMaxConcurrentCount(5)
	// b gives up its room at once: its new share (2) within what the others' claims at its
	// last heartbeat leave (a 4, c still 0 then); it gets the rest once their claims (their
	// old shares) come down.
	if got := shares(); got != "4 1 3 " {
		t.Errorf("shares right after the change = %s; want b at 1", got)
	}
	for range 3 {
		rg.clk.Advance(time.Second)
		beat()
	}
	if got := shares(); got != "2 2 1 " {
		t.Errorf("shares of 5 over 3 = %s; want 2 2 1", got)
	}
	for _, in := range ins {
		if in.rt.MaxConcurrentCount() != 5 {
			t.Errorf("%s: cluster cap %d; want 5", in.rt.InstanceID(), in.rt.MaxConcurrentCount())
		}
	}
	// a dies: after its TTL the others share the cap, but use a's part only once its
	// requests must have ended (its claim: TTL + request timeout + slack after its last
	// heartbeat).
	ins[0].client.SetDown(true)
	ins[0].client = nil
	for range 6 {
		rg.clk.Advance(time.Second)
		beat()
	}
	if got := shares()[2:]; got != "2 1 " {
		t.Errorf("shares of 5 over b, c while a's claim holds = %s; want 2 1", got)
	}
	for range 32 {
		rg.clk.Advance(time.Second)
		beat()
	}
	if got := shares()[2:]; got != "3 2 " {
		t.Errorf("shares of 5 over b, c = %s; want 3 2", got)
	}
	list, err := ins[1].rt.Instances(t.Context())
	if err != nil || len(list) != 3 || list[0].IsLive || !list[1].IsLive || list[1].CapacityShareCount != 3 {
		t.Errorf("Instances = %+v, %v", list, err)
	}
}

func TestRuntimeFailsClosed(t *testing.T) {
	rg := newRig(t)
	x := rg.instance("x", 8)
	x.rt.cfg.AdmitTimeout = 200 * time.Millisecond
	x.client.SetDown(true)
	start := time.Now()
	tk, _, err := x.rt.Admit(t.Context(), ask("down.example", 0, rg.clk.Now()))
	if tk != nil || downloader.ErrorCode(err) != downloader.EUNAVAILABLE {
		t.Fatalf("Admit with TiKV down = %v, %v; want EUNAVAILABLE", tk, err)
	}
	if !errors.Is(err, tikvtest.ErrUnreachable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("cause: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("failing closed took %v", took)
	}
	if err := x.rt.Heartbeat(t.Context()); downloader.ErrorCode(err) != downloader.EUNAVAILABLE {
		t.Errorf("Heartbeat with TiKV down = %v", err)
	}
	x.client.SetDown(false)
	rg.clk.Advance(time.Hour)
	if tk, _ := x.admit(t, ask("down.example", 0, rg.clk.Now())); tk == nil {
		t.Error("refused after TiKV came back")
	}
}

func TestRuntimeSweep(t *testing.T) {
	rg := newRig(t)
	x := rg.instance("x", 8)
	rg.clk.Advance(2 * time.Hour)
	old, _ := x.admit(t, ask("old.example", 0, rg.clk.Now()))
	old.Done(t.Context(), rg.clk.Now())
	busy, _ := x.admit(t, ask("busy.example", 0, rg.clk.Now()))
	_ = busy // never ends: its entry expires in 12 s
	rg.clk.Advance(30 * time.Minute)
	recent, _ := x.admit(t, ask("recent.example", 0, rg.clk.Now()))
	recent.Done(t.Context(), rg.clk.Now())
	if err := x.rt.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	rg.clk.Advance(time.Hour)
	n, err := x.rt.Sweep(t.Context(), rg.clk.Now())
	if err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v; want old and busy (expired) deleted", n, err)
	}
	for d, stored := range map[string]bool{"old.example": false, "busy.example": false, "recent.example": true} {
		st, err := x.rt.Domain(t.Context(), d)
		if err != nil || st.IsStored != stored {
			t.Errorf("%s: stored %v, %v; want %v", d, st.IsStored, err, stored)
		}
	}
	// The loss marker and the instance record are not domains.
	if _, ok, _ := x.store.get(t.Context(), []byte(lossKey)); !ok {
		t.Error("the loss marker was swept")
	}
}

// TestRuntimeExpiredEntryCountsAsSent: a request whose write-back never came is taken as
// sent at its expiry, the latest moment it could have gone out: the next request waits
// one interval from then.
func TestRuntimeExpiredEntryCountsAsSent(t *testing.T) {
	rg := newRig(t)
	x, y := rg.instance("x", 8), rg.instance("y", 8)
	const d, I = "expired.example", 2 * time.Second
	rg.clk.Advance(time.Hour)
	start := rg.clk.Now()
	if tk, _ := x.admit(t, ask(d, I, start)); tk == nil { // expires at start+10s+2s
		t.Fatal("x refused")
	}
	expiry := start.Add(12 * time.Second)
	for _, tc := range []struct {
		at time.Duration // after the expiry
		ok bool
	}{
		{50*time.Millisecond - time.Millisecond, false}, // still in flight, for all y knows
		{50 * time.Millisecond, false},                  // expired: sent at the latest at its expiry
		{I + 50*time.Millisecond - time.Millisecond, false},
		{I + 50*time.Millisecond, true},
	} {
		rg.clk.Set(expiry.Add(tc.at))
		tk, wait := y.admit(t, ask(d, I, rg.clk.Now()))
		if (tk != nil) != tc.ok {
			t.Errorf("y at expiry+%v: admitted %v (wait %v); want %v", tc.at, tk != nil, wait, tc.ok)
		}
	}
}

func TestRuntimeGarbageCollection(t *testing.T) {
	rg := newRig(t)
	x := rg.instance("x", 8)
	x.rt.cfg.GCLifeTime = time.Minute
	rg.clk.Advance(time.Hour)
	for range 3 {
		tk, _ := x.admit(t, ask("gc.example", 0, rg.clk.Now()))
		if tk == nil {
			t.Fatal("refused")
		}
		tk.Done(t.Context(), rg.clk.Now())
	}
	if err := x.rt.collectGarbage(t.Context(), time.Now()); err != nil {
		t.Fatalf("collectGarbage: %v", err)
	}
	if tk, _ := x.admit(t, ask("gc.example", 0, rg.clk.Now())); tk == nil {
		t.Error("refused after GC")
	}
}

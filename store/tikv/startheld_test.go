package tikv

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader/engine"
	"downloader/limiter"
)

// TestStartHeldIDRenewedLate: a process starting under an id whose record another
// incarnation holds waits for that record to expire. The holder renewing it while the
// new process waits proves it alive only when the renewal was begun after the new
// process first looked: a predecessor that died with a heartbeat in flight may have it
// applied late (its heartbeat_at is then older than the first look), and the new process
// must wait for that expiry too, not refuse to start.
func TestStartHeldIDRenewedLate(t *testing.T) {
	cases := []struct {
		name string
		// renewal is the holder's heartbeat_at written while the new process waits,
		// relative to the new process's first look.
		renewal   time.Duration
		wantInUse bool
	}{
		{"a heartbeat begun before the first look, applied after it", -500 * time.Millisecond, false},
		{"a heartbeat begun within the skew allowance of the first look", 50 * time.Millisecond, false},
		{"a heartbeat begun after the first look", 51 * time.Millisecond, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig(t)
			rg.clk.Advance(time.Hour)
			t0 := rg.clk.Now()
			old := rg.instance("x", 8) // registered at t0: expires 5 s later
			oldInc := old.rt.inc.Load()
			old.client.SetDown(true) // it dies

			rg.clk.Advance(2 * time.Second)
			firstLook := rg.clk.Now()
			s, _ := openStore(t, rg.cluster)
			rt, err := NewRuntime(s, RuntimeConfig{Share: engine.EvenShare, InstanceID: "x", Clock: rg.clk, Gate: limiter.NewGate(8, 16),
				MaxConcurrentCount: 8, HeartbeatInterval: time.Second, InstanceTTL: 5 * time.Second, MaxClockSkew: 50 * time.Millisecond,
				AdmitTimeout: 2 * time.Second, ExpirySlack: 2 * time.Second, TSOLag: time.Nanosecond})
			if err != nil {
				t.Fatal(err)
			}
			rt.refNow = func(context.Context) (time.Time, error) { return rg.clk.Now(), nil }
			started := make(chan error, 1)
			go func() { started <- rt.Start(t.Context()) }()
			// waiting is until Start waits on the clock; Start returning instead fails the test.
			waiting := func(what string) {
				t.Helper()
				for {
					ch := rg.clk.Changed()
					if rg.clk.TimerCount() > 0 {
						return
					}
					select {
					case <-ch:
					case err := <-started:
						t.Fatalf("Start returned %v; want it waiting %s", err, what)
					}
				}
			}
			waiting("for the held record's expiry")

			// The holder's record renewed (by the old incarnation) while the new process waits.
			hb := firstLook.Add(tc.renewal)
			rec := instanceRecord{InstanceID: "x", IncarnationID: oldInc, StartedAt: firstLook.Add(-time.Hour).UTC(), HeartbeatAt: hb.UTC(),
				ExpiresAt: hb.Add(5 * time.Second).UTC(), CapacityShareCount: 8, MaxClockSkewMs: 50}
			b, err := json.Marshal(&rec)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.update(t.Context(), func(txn *transaction.KVTxn) error { return txn.Set([]byte(instancePrefix+"x"), b) }); err != nil {
				t.Fatal(err)
			}
			// At the first record's expiry plus the skew allowance and an interval it looks
			// again and finds the renewed record, live.
			rg.clk.Set(t0.Add(5*time.Second + 50*time.Millisecond + time.Second))
			if tc.wantInUse {
				if err := <-started; !isInstanceIDInUse(err) {
					t.Fatalf("Start: %v; want the id in use", err)
				}
				return
			}
			waiting("for the renewed record's expiry")
			rg.clk.Set(rec.ExpiresAt.Add(2 * time.Second)) // past its expiry, the skew and an interval
			waiting("two intervals after registering")
			rg.clk.Advance(2 * time.Second)
			if err := <-started; err != nil {
				t.Fatalf("Start: %v; want it started once the dead holder's record expired", err)
			}
			if rt.inc.Load() == oldInc {
				t.Error("the new process has its predecessor's incarnation")
			}
		})
	}
}

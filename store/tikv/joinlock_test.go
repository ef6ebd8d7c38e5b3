package tikv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tikv/client-go/v2/tikvrpc"

	"downloader/clock/clocktest"
	"downloader/engine"
	"downloader/limiter"
	"downloader/store/tikv/tikvtest"
)

// TestJoinClearsLockLeftByDeadPredecessor: a process dies between its heartbeat's
// prewrite and commit, which leaves a lock on its instance record for client-go's lock
// TTL (3 s from the prewrite, real time: PD's clock). A process restarted under the same
// id once that record has expired joins at once: its first write of the record does not
// wait for the rest of the lock's TTL, which here is longer than its heartbeat deadline.
func TestJoinClearsLockLeftByDeadPredecessor(t *testing.T) {
	rg := newRig(t)
	rg.clk.Advance(time.Hour)
	old := rg.instanceWith("x", 8, func(c *RuntimeConfig) { c.AdmitTimeout = 300 * time.Millisecond })
	oldInc := old.rt.inc.Load()
	// Its next heartbeat reads and prewrites; nothing after the prewrite reaches TiKV (no
	// commit, no rollback): it dies with the heartbeat half done.
	old.client.Cut(func(req *tikvrpc.Request) bool {
		switch req.Type {
		case tikvrpc.CmdScan, tikvrpc.CmdGet, tikvrpc.CmdBatchGet, tikvrpc.CmdPrewrite:
			return false
		}
		return true
	})
	if err := old.rt.Heartbeat(t.Context()); err == nil {
		t.Fatal("the heartbeat whose commit was cut succeeded")
	}
	old.client.SetDown(true)

	// Its record expires (the rig's clock; the lock's TTL runs on PD's real one).
	rg.clk.Advance(5*time.Second + 50*time.Millisecond + time.Second)
	rt, s, _, logged := rg.joining("x")
	started := make(chan error, 1)
	go func() { started <- rt.Start(t.Context()) }()
	// Registered, Start waits two intervals on the rig's clock for its share.
	awaitSleep(t, rg.clk, started, "registered past the lock its predecessor left")
	rg.clk.Advance(2 * time.Second)
	if err := <-started; err != nil {
		t.Fatalf("Start: %v; want it started", err)
	}
	if !strings.Contains(logged.String(), "locked by a transaction of a process that holds no lease") {
		t.Errorf("no lock was resolved (log: %s); the test's predecessor left none", logged.String())
	}
	// The record is the new incarnation's; the dead heartbeat was rolled back, not applied.
	v, ok, err := s.get(t.Context(), []byte(instancePrefix+"x"))
	var rec instanceRecord
	if err != nil || !ok || json.Unmarshal(v, &rec) != nil {
		t.Fatalf("the record: %s %v %v", v, ok, err)
	}
	if rec.IncarnationID == oldInc || rec.IncarnationID != rt.inc.Load() {
		t.Errorf("the record's incarnation %d; want the new process's %d", rec.IncarnationID, rt.inc.Load())
	}
}

// lockedBuffer is a bytes.Buffer safe for the logger's and the test's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStartRetriesWhileTiKVDoesNotAnswer: a process started while TiKV does not answer its
// heartbeats waits, admitting nothing, and joins once TiKV answers: Start returns only
// then, and with nil. (It used to return the first heartbeat's error, and the service
// exited.)
func TestStartRetriesWhileTiKVDoesNotAnswer(t *testing.T) {
	rg := newRig(t)
	rt, _, cl, logged := rg.joining("x")
	cl.SetDown(true)
	started := make(chan error, 1)
	go func() { started <- rt.Start(t.Context()) }()
	for i := range 3 {
		awaitSleep(t, rg.clk, started, fmt.Sprintf("failed heartbeat %d", i+1))
		rg.clk.Advance(joinRetryMax)
		if _, err := rt.fence(rg.clk.Now()); err == nil {
			t.Errorf("after %d failed heartbeats the instance may admit; want it fenced until it joined", i+1)
		}
	}
	cl.SetDown(false)
	// Its pauses go on (a heartbeat may have failed as TiKV came back) until it registers,
	// waits for its share and returns.
	for joined := false; !joined; {
		ch := rg.clk.Changed()
		if rg.clk.TimerCount() > 0 {
			rg.clk.Advance(joinRetryMax)
			continue
		}
		select {
		case err := <-started:
			if err != nil {
				t.Fatalf("Start: %v; want it joined once TiKV answered", err)
			}
			joined = true
		case <-ch:
		}
	}
	if _, err := rt.fence(rg.clk.Now()); err != nil {
		t.Errorf("joined, the instance is fenced: %v", err)
	}
	if n := strings.Count(logged.String(), "TiKV did not answer the heartbeat; trying again"); n < 3 {
		t.Errorf("%d retries logged; want at least 3 (log: %s)", n, logged.String())
	}
}

// joining is a process of instance id on the rig, not started, its heartbeat deadline 1 s,
// its log kept (a TextHandler's lines).
func (rg *rig) joining(id string) (*Runtime, *Store, *tikvtest.Client, *lockedBuffer) {
	rg.t.Helper()
	s, cl := openStore(rg.t, rg.cluster)
	logged := &lockedBuffer{}
	rt, err := NewRuntime(s, RuntimeConfig{Share: engine.EvenShare, InstanceID: id, Clock: rg.clk, Gate: limiter.NewGate(8, 16),
		Logger:             slog.New(slog.NewTextHandler(logged, nil)),
		MaxConcurrentCount: 8, HeartbeatInterval: time.Second, InstanceTTL: 5 * time.Second, MaxClockSkew: 50 * time.Millisecond,
		AdmitTimeout: time.Second, ExpirySlack: 2 * time.Second, TSOLag: time.Nanosecond})
	if err != nil {
		rg.t.Fatal(err)
	}
	rt.refNow = func(context.Context) (time.Time, error) { return rg.clk.Now(), nil }
	return rt, s, cl, logged
}

// awaitSleep waits until Start, running with started as its result, sleeps on clk, and
// fails the test if Start returns first (what says where it should be waiting).
func awaitSleep(t *testing.T, clk *clocktest.Fake, started <-chan error, what string) {
	t.Helper()
	for clk.TimerCount() == 0 {
		ch := clk.Changed()
		if clk.TimerCount() > 0 {
			return
		}
		select {
		case <-ch:
		case err := <-started:
			t.Fatalf("Start returned %v; want it waiting (%s)", err, what)
		}
	}
}

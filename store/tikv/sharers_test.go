package tikv

import (
	"testing"
	"time"
)

// TestCapSplitOverClaimingInstances: instances whose heartbeats were starved past their
// leases find each other dropped but still claiming. Their next heartbeats may commit side
// by side, each from the other's old record (each writes only its own record), so each
// must take no more than its share of the instances still claiming: were the cap split
// over the live ones alone, a and b would each take 24 less the other's old claim of 8,
// 32 together.
func TestCapSplitOverClaimingInstances(t *testing.T) {
	rg := newRig(t)
	a, b, c := rg.instance("a", 24), rg.instance("b", 24), rg.instance("c", 24)
	beat := func(ins ...*instance) {
		t.Helper()
		for _, in := range ins {
			if err := in.rt.Heartbeat(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	rg.clk.Advance(2 * time.Second) // past the joining intervals
	beat(a, b, c)
	beat(a, b, c)
	for _, in := range []*instance{a, b, c} {
		if got := in.gate.Capacity(); got != 8 {
			t.Fatalf("%s: capacity %d, want 8 of 24 over three", in.rt.id, got)
		}
	}
	c.client.SetDown(true) // c is gone: its claim ends a second before a's and b's
	rg.clk.Advance(time.Second)
	beat(a, b)
	// a and b starve past their leases (both fenced) until c's claim has ended and theirs
	// has not: lease end (5 s) + request timeout (30 s) + slack (2 s) after the beat.
	rg.clk.Advance(36*time.Second + 500*time.Millisecond)
	if _, err := a.rt.fence(rg.clk.Now()); err == nil {
		t.Fatal("a is not fenced after its lease")
	}
	// b's heartbeat begins before a's commits: its snapshot has a's old record.
	txn, err := b.store.begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txn.Rollback() }()
	beat(a)
	if got := a.gate.Capacity(); got != 12 {
		t.Errorf("a: capacity %d with b dropped but claiming 8; want its share 12 of the two claiming", got)
	}
	b.rt.mu.Lock()
	st := b.rt.membership.copyForView()
	b.rt.mu.Unlock()
	v, err := b.rt.viewIn(t.Context(), txn, b.rt.inc.Load(), st)
	if err != nil {
		t.Fatal(err)
	}
	if sum := a.gate.Capacity() + v.capacity; sum > 24 {
		t.Errorf("a takes %d and b, side by side from a's old record, %d: %d over the cap 24", a.gate.Capacity(), v.capacity, sum)
	}
}

package tikv

import (
	"fmt"
	"testing"
	"time"

	"github.com/tikv/client-go/v2/txnkv/transaction"
)

func batchOf(in *instance, now time.Time, interval time.Duration, domains ...string) []*admitReq {
	var out []*admitReq
	for _, d := range domains {
		a := ask(d, interval, now)
		out = append(out, &admitReq{a: &a, key: domainKey(d), id: in.rt.seq.Add(1), done: make(chan struct{}), wake: make(chan struct{}, 1)})
	}
	return out
}

// TestAdmitBatch: admissions of different domains decided in one transaction (one
// BatchGet, one prewrite) get what each would alone: admitted with its own entry, then
// refused for the interval; a record that cannot be decoded fails its own admission only.
func TestAdmitBatch(t *testing.T) {
	rg := newRig(t)
	x := rg.instance("x", 8)
	rg.clk.Advance(2 * time.Second) // past the loss marker's interval and skew
	const I = time.Second
	var domains []string
	for i := range 10 {
		domains = append(domains, fmt.Sprintf("b%d.example", i))
	}
	before := x.client.Counts()
	batch := batchOf(x, rg.clk.Now(), I, domains...)
	x.rt.runAdmitBatch(t.Context(), batch)
	sent := x.client.Counts().Sub(before)
	if sent.BatchGet != 1 || sent.Get != 0 || sent.Prewrite != 1 {
		t.Errorf("a batch of 10 sent %+v; want one BatchGet and one prewrite", sent)
	}
	for _, req := range batch {
		if req.err != nil || !req.d.admit {
			t.Errorf("%s: admit %v, err %v; want admitted", req.a.Domain, req.d.admit, req.err)
		}
		select {
		case <-req.done:
		default:
			t.Errorf("%s: done not closed", req.a.Domain)
		}
		st, err := x.rt.Domain(t.Context(), req.a.Domain)
		if err != nil || len(st.InFlightRequests) != 1 || st.InFlightRequests[0].InstanceID != "x" {
			t.Errorf("%s: %+v, %v; want one entry of x", req.a.Domain, st, err)
		}
	}

	// The same domains 100 ms later: each refused until its interval ends.
	rg.clk.Advance(100 * time.Millisecond)
	again := batchOf(x, rg.clk.Now(), I, domains...)
	x.rt.runAdmitBatch(t.Context(), again)
	for _, req := range again {
		if req.err != nil || req.d.admit || req.d.wait != I-100*time.Millisecond {
			t.Errorf("%s again: admit %v wait %v err %v; want refused for 900ms", req.a.Domain, req.d.admit, req.d.wait, req.err)
		}
	}

	// A record that is not JSON: its admission fails, the others' do not.
	if err := x.store.update(t.Context(), func(txn *transaction.KVTxn) error {
		return txn.Set(domainKey("bad.example"), []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	mixed := batchOf(x, rg.clk.Now(), I, "bad.example", "good.example")
	x.rt.runAdmitBatch(t.Context(), mixed)
	if mixed[0].err == nil || mixed[0].d.admit {
		t.Errorf("bad.example: admit %v err %v; want a decode error", mixed[0].d.admit, mixed[0].err)
	}
	if mixed[1].err != nil || !mixed[1].d.admit {
		t.Errorf("good.example beside a bad record: admit %v err %v; want admitted", mixed[1].d.admit, mixed[1].err)
	}

	// Past the lease: every member is fenced, nothing is read.
	rg.clk.Advance(10 * time.Second)
	before = x.client.Counts()
	late := batchOf(x, rg.clk.Now(), I, "late1.example", "late2.example")
	x.rt.runAdmitBatch(t.Context(), late)
	for _, req := range late {
		if !req.isFenced || req.err == nil || req.d.admit {
			t.Errorf("%s past the lease: fenced %v err %v admit %v", req.a.Domain, req.isFenced, req.err, req.d.admit)
		}
	}
	if sent := x.client.Counts().Sub(before); sent.BatchGet != 0 || sent.Prewrite != 0 {
		t.Errorf("a fenced batch sent %+v", sent)
	}
}

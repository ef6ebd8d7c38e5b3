package tikv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tikv/client-go/v2/tikvrpc"

	"downloader"
	"downloader/clock"
	"downloader/internal/testkit"
	"downloader/netguard"
	"downloader/origintest"
	"downloader/store/tikv/tikvtest"
)

// Three instances on one mock cluster under the network's conditions (tikvtest.Faults),
// mixed A/B/C traffic on 60 domains (every tenth redirecting), violations counted at the
// origin: zero in every case.

// netCluster is three nodes, their origin and their traffic.
type netCluster struct {
	t          *testing.T
	cluster    *tikvtest.Cluster
	guard      *netguard.Guard
	origin     *clusterOrigin
	nodes      []*node
	intervalOf map[string]time.Duration
	domains    []string
	sends      *sendLog // every connection's first write, the clients' view

	sent, refused, failedClosed [3]atomic.Int64 // per node
	// isDead: the node was made to die. Its clients' requests then in flight may end in any
	// way (a dead process answers nothing): they are not counted, nor failures of the test.
	isDead  [3]atomic.Bool
	stop    []chan struct{}
	traffic sync.WaitGroup
}

// newNetCluster starts three nodes with the given clocks (nil: the real clock).
func newNetCluster(t *testing.T, clocks ...clock.Clock) *netCluster {
	if testing.Short() {
		t.Skip("runs for several seconds")
	}
	nc := &netCluster{t: t, origin: newClusterOrigin(), intervalOf: map[string]time.Duration{}}
	t.Cleanup(nc.origin.Close)
	rule, err := netguard.ParseConnectTo(nc.origin.ConnectTo())
	if err != nil {
		t.Fatal(err)
	}
	nc.sends = &sendLog{}
	guard := netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}, Dialer: loopbackDialer{t, &atomic.Int64{}, nc.sends}, Resolver: noResolver{t}})
	c := tikvtest.NewCluster(t)
	nc.cluster, nc.guard = c, guard
	for i := range 3 {
		var clk clock.Clock = clock.Real{}
		if i < len(clocks) && clocks[i] != nil {
			clk = clocks[i]
		}
		nc.nodes = append(nc.nodes, startNodeOn(t, c, fmt.Sprintf("node-%d", i), guard, 24, clk))
		nc.stop = append(nc.stop, make(chan struct{}))
	}
	intervals := []time.Duration{200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond}
	for i := range 60 {
		d := fmt.Sprintf("n%02d.test", i)
		nc.domains = append(nc.domains, d)
		nc.intervalOf[d] = intervals[i%len(intervals)]
		if i%10 == 0 {
			nc.intervalOf["landing-"+d] = clusterDefaultIval
		}
	}
	t.Cleanup(nc.stopTraffic)
	return nc
}

// waitShares waits until every node has its share of the cap (they registered).
func (nc *netCluster) waitShares() {
	testkit.WaitFor(nc.t, clusterWait, "three instances sharing the cap", func() bool {
		for _, n := range nc.nodes {
			if n.gate.Capacity() != 8 {
				return false
			}
		}
		return true
	})
}

// startTraffic starts three workers per node sending A, B and C requests at random domains.
func (nc *netCluster) startTraffic(seed uint64) {
	for ni, n := range nc.nodes {
		for w := range 3 {
			nc.traffic.Go(func() {
				rng := rand.New(rand.NewPCG(seed+uint64(ni), uint64(w)))
				for k := 0; ; k++ {
					select {
					case <-nc.stop[ni]:
						return
					default:
					}
					d := nc.domains[rng.IntN(len(nc.domains))]
					path := fmt.Sprintf("/page/%s/%d", n.id, (k+w)%3)
					if strings.HasSuffix(d, "0.test") {
						path = "/redir"
					}
					nc.send(ni, n, (k+w)%3, d, path, fmt.Sprintf("%s-%d-%d", n.id, w, k))
				}
			})
		}
	}
}

// send sends one request through entry e (0 A, 1 B, 2 C) and counts its outcome. Nothing
// of a dead node's requests counts, or fails the test: a dead process answers nothing.
func (nc *netCluster) send(ni int, n *node, e int, d, path, taskID string) {
	t := nc.t
	fail := func(format string, args ...any) {
		if t.Context().Err() == nil && !nc.isDead[ni].Load() {
			t.Errorf(format, args...)
		}
	}
	iv := nc.intervalOf[d].Milliseconds()
	if e == 0 {
		out := n.eng.RunTask(t.Context(), &downloader.Task{TaskID: taskID, URL: "http://" + d + path, MinIntervalMs: &iv,
			LeaseExpiresAt: time.Now().Add(3 * time.Second)})
		switch {
		case out.Release:
			nc.refused[ni].Add(1)
		case out.Report != nil && out.Report.HasReachedOrigin:
			nc.sent[ni].Add(1)
		case out.Report != nil && out.Report.FailReason != nil && *out.Report.FailReason == downloader.FailSelfRateLimited:
			nc.refused[ni].Add(1)
		case out.Report != nil && out.Report.FailReason != nil && *out.Report.FailReason == downloader.FailRuntimeStoreUnavailable:
			nc.failedClosed[ni].Add(1)
		case out.Report != nil:
			fail("%s: task failed: %+v (%v)", n.id, out.Report.Summary, *out.Report.FailReason)
		}
		return
	}
	entry := "/v1/render"
	if e == 2 {
		entry = "/v1/probe"
	}
	code, m, err := n.post(entry, fmt.Sprintf(`{"url":"http://%s%s","min_interval_ms":%d,"should_render":false}`, d, path, iv))
	switch {
	case err != nil:
		fail("%s %s: %v", n.id, entry, err)
	case code == http.StatusTooManyRequests:
		nc.refused[ni].Add(1)
	case code == http.StatusServiceUnavailable:
		nc.failedClosed[ni].Add(1)
	case code != http.StatusOK:
		fail("%s %s %s: %d %v", n.id, entry, d, code, m)
	case m["has_reached_origin"] == true:
		nc.sent[ni].Add(1)
	case m["fail_reason"] == string(downloader.FailSelfRateLimited):
		nc.refused[ni].Add(1)
	case m["fail_reason"] == string(downloader.FailRuntimeStoreUnavailable):
		nc.failedClosed[ni].Add(1)
	default:
		fail("%s %s %s: %v", n.id, entry, d, m)
	}
}

// waitSent waits until each node in who sent at least n more requests than it had when
// called.
func (nc *netCluster) waitSent(what string, n int64, who ...int) {
	base := make([]int64, len(who))
	for i, ni := range who {
		base[i] = nc.sent[ni].Load()
	}
	testkit.WaitFor(nc.t, clusterWait, what, func() bool {
		for i, ni := range who {
			if nc.sent[ni].Load() < base[i]+n {
				return false
			}
		}
		return true
	})
}

// stopTraffic stops every worker (idempotent).
func (nc *netCluster) stopTraffic() {
	for _, ch := range nc.stop {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	nc.traffic.Wait()
}

// check stops the traffic and fails the test for every violation at the origin.
func (nc *netCluster) check() {
	nc.stopTraffic()
	v := nc.origin.Violations(func(host string) (time.Duration, bool) {
		iv, ok := nc.intervalOf[host]
		return iv, ok && iv > 0
	}, clusterTolerance)
	for _, x := range v {
		nc.t.Errorf("violation: %v", x)
	}
	// Every arrival at a host that saw one, in order: which node and entry sent the pair
	// (the path names both).
	for _, host := range slices.Compact(slices.Sorted(func(yield func(string) bool) {
		for _, x := range v {
			if !yield(x.Host) {
				return
			}
		}
	})) {
		arrivals := slices.DeleteFunc(nc.origin.Arrivals(), func(a origintest.Arrival) bool { return a.Host != host })
		slices.SortFunc(arrivals, func(a, b origintest.Arrival) int { return a.At.Compare(b.At) })
		for _, a := range arrivals {
			stamp := "kernel time"
			if a.IsHandlerTime {
				stamp = "handler time"
			}
			nc.t.Logf("arrival at %s: %s (%s) %s from %s", host, a.At.Format("15:04:05.000000"), stamp, a.Path, a.Remote)
		}
		for _, s := range nc.sends.of(host) {
			nc.t.Logf("a first write to %s: %s from %s, began %s, returned %s", host, s.path, s.local,
				s.before.Format("15:04:05.000000"), s.after.Format("15:04:05.000000"))
		}
		for _, n := range nc.nodes {
			for _, at := range n.wires.of(host) {
				nc.t.Logf("%s's limiter: a request to %s on the wire at %s", n.id, host, at.Format("15:04:05.000000"))
			}
		}
	}
	nc.t.Logf("reached the origin per node %d %d %d; refused %d %d %d; failed closed %d %d %d; arrivals %d (%d without a kernel stamp); violations %d",
		nc.sent[0].Load(), nc.sent[1].Load(), nc.sent[2].Load(), nc.refused[0].Load(), nc.refused[1].Load(), nc.refused[2].Load(),
		nc.failedClosed[0].Load(), nc.failedClosed[1].Load(), nc.failedClosed[2].Load(), len(nc.origin.Arrivals()),
		nc.origin.UnstampedCount(), len(v))
}

// arrivalsFrom counts the arrivals whose path names node id at or after since.
func (nc *netCluster) arrivalsFrom(id string, since time.Time) int {
	n := 0
	for _, a := range nc.origin.Arrivals() {
		if strings.HasPrefix(a.Path, "/page/"+id+"/") && !a.At.Before(since) {
			n++
		}
	}
	return n
}

// TestClusterLatency: 1 ms ± 0.5 ms on every TiKV and PD round trip of every instance.
func TestClusterLatency(t *testing.T) {
	nc := newNetCluster(t)
	for _, n := range nc.nodes {
		n.client.SetFaults(tikvtest.Faults{Latency: time.Millisecond, Jitter: 500 * time.Microsecond, Seed: 1})
	}
	nc.waitShares()
	nc.startTraffic(1)
	nc.waitSent("traffic on every node", 25, 0, 1, 2)
	nc.check()
}

// TestClusterFault: 1 % of every instance's TiKV requests fail: region errors,
// ServerIsBusy, timeouts and answers lost after the request was applied.
func TestClusterFault(t *testing.T) {
	nc := newNetCluster(t)
	for i, n := range nc.nodes {
		n.client.SetFaults(tikvtest.Faults{FaultRate: 0.01, Seed: uint64(i + 1)})
	}
	nc.waitShares()
	nc.startTraffic(2)
	nc.waitSent("traffic on every node", 25, 0, 1, 2)
	nc.check()
	injected, sent := int64(0), int64(0)
	for _, n := range nc.nodes {
		injected += n.client.InjectedFaultCount()
		c := n.client.Counts()
		sent += c.Get + c.BatchGet + c.Prewrite + c.Commit + c.OtherTiKV
	}
	t.Logf("injected faults: %d in %d TiKV requests", injected, sent)
	if injected == 0 {
		t.Error("no fault was injected")
	}
}

// TestClusterPartition: node 2 is cut off from the whole cluster for longer than its
// heartbeat's expiry and its requests' (TTL + request timeout + slack): the others go on
// and take its share once its claim ended; it sends nothing it admitted after the cut;
// it rejoins cleanly. Then node 2's heartbeats alone fail (a partial partition: its
// admissions still work): it fences itself, and the cap is never exceeded.
func TestClusterPartition(t *testing.T) {
	nc := newNetCluster(t)
	nc.waitShares()
	nc.startTraffic(3)
	nc.waitSent("traffic on every node", 10, 0, 1, 2)
	cut := time.Now()
	nc.nodes[2].client.SetDown(true)
	// Its requests admitted before the cut end within the request timeout (from their
	// slot) plus the slack; nothing later may come from it.
	quiet := cut.Add(clusterTimeout + clusterSlack)
	// Node 2's last record as the others read it (it can write none after the cut): its
	// requests end by its claim's end, its last heartbeat + TTL + request timeout + slack.
	// (Measured from the cut this would be wrong when node 2's heartbeats were starved and
	// it had fenced itself before the cut.)
	insts, err := nc.nodes[0].rt.instances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var claimEnd time.Time
	for _, in := range insts {
		if in.InstanceID == "node-2" {
			claimEnd = in.claimUntil()
			if d := claimEnd.Sub(in.HeartbeatAt); d < clusterTTL+clusterTimeout {
				t.Errorf("node 2's claim ends %v after its heartbeat, want at least TTL + request timeout", d)
			}
		}
	}
	if claimEnd.IsZero() {
		t.Fatal("node 2 has no instance record")
	}
	testkit.WaitFor(t, clusterWait, "the cap split over nodes 0 and 1", func() bool {
		return nc.nodes[0].gate.Capacity() == 12 && nc.nodes[1].gate.Capacity() == 12
	})
	if early := time.Until(claimEnd); early > 0 {
		t.Errorf("node 2's share was taken %v before its claim ended (%v after the cut): before its requests must have ended", early, time.Since(cut))
	}
	nc.waitSent("traffic on nodes 0 and 1 while node 2 is cut off", 10, 0, 1)
	if n := nc.arrivalsFrom("node-2", quiet); n > 0 {
		t.Errorf("node 2 sent %d requests while cut off", n)
	}
	nc.nodes[2].client.SetDown(false)
	testkit.WaitFor(t, clusterWait, "node 2 rejoined", func() bool {
		return nc.nodes[2].gate.Capacity() == 8 && nc.nodes[0].gate.Capacity() == 8
	})
	nc.waitSent("traffic on node 2 again", 5, 2)

	// The partial partition: node 2's heartbeat writes fail, its admissions go on.
	writesOf2 := tikvtest.Touches([]byte(instancePrefix + "node-2"))
	late := time.Now()
	nc.nodes[2].client.Cut(func(req *tikvrpc.Request) bool { return req.Type == tikvrpc.CmdPrewrite && writesOf2(req) })
	// What the cluster may have in flight: each admitting node its capacity (or more while
	// its requests drain), a fenced node what it still has at the origin.
	over := 0
	testkit.WaitFor(t, clusterWait, "node 2 dropped, its claim ended, its share taken", func() bool {
		sum := 0
		for _, n := range nc.nodes {
			if _, err := n.rt.fence(n.rt.clk.Now()); err == nil {
				sum += max(n.gate.Capacity(), n.gate.InFlight())
			} else {
				sum += nc.origin.inProgress(n.id)
			}
		}
		if sum > 24 {
			over++
		}
		return nc.nodes[0].gate.Capacity() == 12 && nc.nodes[1].gate.Capacity() == 12
	})
	if over > 0 {
		t.Errorf("the cluster could exceed its cap of 24 at %d of the checks", over)
	}
	if _, err := nc.nodes[2].rt.fence(nc.nodes[2].rt.clk.Now()); !isFencedFor(err, errLeaseEnded) {
		t.Errorf("node 2 with its heartbeats failing: %v; want fenced, heartbeat late", err)
	}
	if n := nc.arrivalsFrom("node-2", late.Add(clusterTTL+clusterTimeout+clusterSlack)); n > 0 {
		t.Errorf("node 2 sent %d requests after its lease ended", n)
	}
	nc.nodes[2].client.Cut(nil)
	nc.waitSent("traffic on node 2 after its heartbeats came back", 5, 2)
	nc.check()
}

func isFencedFor(err, cause error) bool { return err != nil && errors.Is(err, cause) }

// TestClusterSkew: node 1's clock is 5 ms ahead (within half the 20 ms allowance) and node
// 2's 40 ms ahead (beyond it: its requests would be early at the origin by up to 20 ms).
// Node 2 fences itself and sends nothing; once its clock is fixed it admits again.
func TestClusterSkew(t *testing.T) {
	skewed := tikvtest.NewSkewedClock(clock.Real{}, 40*time.Millisecond)
	nc := newNetCluster(t, nil, tikvtest.NewSkewedClock(clock.Real{}, 5*time.Millisecond), skewed)
	testkit.WaitFor(t, clusterWait, "node 2 fenced for its clock", func() bool {
		_, err := nc.nodes[2].rt.fence(skewed.Now())
		return isFencedFor(err, errClockSkewed)
	})
	nc.startTraffic(4)
	nc.waitSent("traffic on nodes 0 and 1", 25, 0, 1)
	if n := nc.sent[2].Load(); n > 0 {
		t.Errorf("node 2, its clock 40 ms off, sent %d requests", n)
	}
	list, err := nc.nodes[0].rt.Instances(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if want := in.InstanceID == "node-2"; in.IsFenced != want || (want && in.FenceReason != fenceClockSkewed) {
			t.Errorf("%s: is_fenced %v %q; want %v", in.InstanceID, in.IsFenced, in.FenceReason, want)
		}
	}
	skewed.SetOffset(0) // NTP fixed it: the next checks bound it again
	nc.waitSent("traffic on node 2 once its clock is fixed", 5, 2)
	nc.check()
}

// TestClusterFaultRestartFixedInstanceID: node 1 dies while its last request is held at
// the origin and its wire moment was not written back (its write-backs fail), and a new
// process starts under the same --instance-id: it waits for the dead one's heartbeat to
// expire, then respects its entry until it expires (it may still go on the wire, for all
// the new process knows). (That a second process started with the id of a live one is
// refused is TestStartHeldIDRenewedLate's: here, on the real clock, whether node-0 renews
// its record within its TTL depends on the machine's speed, and a node that does not is
// fenced and may rightly be taken over.)
func TestClusterFaultRestartFixedInstanceID(t *testing.T) {
	nc := newNetCluster(t)
	const held = "restart-held.test"
	nc.intervalOf[held] = 100 * time.Millisecond // before the traffic reads the map
	nc.waitShares()
	nc.startTraffic(5)
	nc.waitSent("traffic on every node", 5, 0, 1, 2)
	old := nc.nodes[1]
	// Its write-backs fail from now on; admissions work. Both read with BatchGet: an
	// admission's reads the loss marker too (admission.go), a write-back's does not.
	old.client.Cut(func(req *tikvrpc.Request) bool {
		if req.Type != tikvrpc.CmdBatchGet {
			return false
		}
		return !slices.ContainsFunc(req.BatchGet().GetKeys(), func(k []byte) bool { return string(k) == lossKey })
	})
	// The render is sent again while it comes back at once: node 1 rightly refuses it, or
	// fails closed, when its heartbeat is late (a loaded machine); the test needs one held.
	var holding sync.WaitGroup
	stopHolding := make(chan struct{})
	holding.Go(func() {
		for {
			_, m, err := old.post("/v1/render", fmt.Sprintf(`{"url":"http://%s/hold","min_interval_ms":100,"should_render":false,"timeout_ms":%d}`,
				held, heldTimeout.Milliseconds()))
			if err != nil || m["has_reached_origin"] == true {
				return
			}
			select {
			case <-stopHolding:
				return
			default:
			}
		}
	})
	defer holding.Wait()
	defer nc.origin.releaseAll()
	defer close(stopHolding)
	testkit.WaitFor(t, clusterWait, "the held request at the origin", func() bool { h, _, _ := nc.origin.state(); return h == 1 })
	nc.isDead[1].Store(true)
	close(nc.stop[1])
	old.client.SetDown(true) // it dies: no write-back, no heartbeat, no goodbye
	old.stop()
	v, ok, err := nc.nodes[0].store.get(t.Context(), domainKey(held))
	var rec domainRecord
	// The held request's entry is the last; an earlier attempt admitted and then not sent
	// (its instance fenced after the commit) left one too, which only expires.
	if err != nil || !ok || json.Unmarshal(v, &rec) != nil || len(rec.InFlightRequests) == 0 ||
		slices.ContainsFunc(rec.InFlightRequests, func(f inFlight) bool { return !f.WireAt.IsZero() }) {
		t.Fatalf("the dead process's entries: %s %v %v; want them not wired", v, ok, err)
	}
	var expiry time.Time
	for _, f := range rec.InFlightRequests {
		if e := f.ExpiresAt.Add(clusterSkew); e.After(expiry) {
			expiry = e
		}
	}

	restarted := startNode(t, nc.cluster, "node-1", nc.guard, 24)
	restarted.waitJoined(t) // its Start waits for the dead one's heartbeat record to expire
	if restarted.rt.inc.Load() == old.rt.inc.Load() {
		t.Fatal("the restarted process has its predecessor's incarnation")
	}
	var admittedAt time.Time
	testkit.WaitFor(t, clusterWait, "the held domain admitted by the restarted process", func() bool {
		code, m, err := restarted.post("/v1/probe", fmt.Sprintf(`{"url":"http://%s/page","min_interval_ms":100,"should_render":false}`, held))
		if err != nil || code != http.StatusOK {
			t.Fatalf("probe: %d %v %v", code, m, err)
		}
		if m["has_reached_origin"] == true {
			admittedAt = time.Now()
			return true
		}
		return false
	})
	if admittedAt.Before(expiry) {
		t.Errorf("the restarted process admitted %s %v before its predecessor's unwired request expired", held, expiry.Sub(admittedAt))
	}

	nc.check()
}

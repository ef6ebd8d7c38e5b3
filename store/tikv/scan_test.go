package tikv

import (
	"context"
	"testing"
	"time"

	"github.com/tikv/client-go/v2/tikvrpc"

	"downloader/internal/testkit"
	"downloader/store/tikv/tikvtest"
)

// TestStalledScanEndsWithItsContext: client-go's scanner retries on a context of its own,
// so a read through a scan whose region does not answer must still return when its
// caller's context ends (scanWithin), as every other read does: a heartbeat, whose lease
// the admissions rely on, the instance list and a results page.
func TestStalledScanEndsWithItsContext(t *testing.T) {
	cases := []struct {
		name string
		call func(ctx context.Context, in *instance) error
	}{
		{"heartbeat", func(ctx context.Context, in *instance) error { return in.rt.Heartbeat(ctx) }},
		{"instance list", func(ctx context.Context, in *instance) error { _, err := in.rt.Instances(ctx); return err }},
		{"results page", func(ctx context.Context, in *instance) error {
			_, _, err := in.store.FetchResults(ctx, "", 10, "")
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig(t)
			in := rg.instance("x", 8)
			stalled := make(chan struct{})
			defer close(stalled) // before the cluster closes: the scan then ends
			in.client.SetFaults(tikvtest.Faults{Block: stalled, Match: func(req *tikvrpc.Request) bool { return req.Type == tikvrpc.CmdScan }})
			sent := in.client.Counts().OtherTiKV // scans count there
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- tc.call(ctx, in) }()
			testkit.WaitFor(t, clusterWait, "the scan sent", func() bool { return in.client.Counts().OtherTiKV > sent })
			cancel()
			limit := time.NewTimer(clusterWait) // a bound: a broken test fails, never hangs
			defer limit.Stop()
			select {
			case err := <-done:
				if err == nil {
					t.Error("succeeded with its scan stalled")
				}
			case <-limit.C:
				t.Errorf("still waiting for its stalled scan %v after its context ended", clusterWait)
			}
		})
	}
}

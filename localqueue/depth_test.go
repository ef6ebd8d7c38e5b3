package localqueue

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"downloader"
	"downloader/store/embedded/embeddedtest"
)

// TestSubmitAtDepthKeepsTheDepth: a task queued at a depth keeps it in its record, across a
// lease, a report and a reopen; a duplicate keeps its first depth; Submit is depth 0.
func TestSubmitAtDepthKeepsTheDepth(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := embeddedtest.Open(t, dir)
	q, err := Open(t.Context(), s, Config{})
	if err != nil {
		t.Fatal(err)
	}
	ms := int64(0)
	if _, err := q.Submit(t.Context(), []downloader.Task{{URL: "http://a.test/", MinIntervalMs: &ms, ShouldStore: true}}); err != nil {
		t.Fatal(err)
	}
	res, err := q.SubmitAtDepth(t.Context(), []downloader.Task{{URL: "http://a.test/x", MinIntervalMs: &ms}, {URL: "http://a.test/"}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].IsDuplicate || !res[1].IsDuplicate {
		t.Fatalf("results %+v", res)
	}
	depthOf := func(id string) int {
		t.Helper()
		rec, err := q.Task(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Depth
	}
	if d := depthOf(res[0].TaskID); d != 2 {
		t.Errorf("depth %d, want 2", d)
	}
	if d := depthOf(res[1].TaskID); d != 0 {
		t.Errorf("the duplicate's depth %d, want its first 0", d)
	}
	tasks, err := q.Lease(t.Context(), "w", 10)
	if err != nil || len(tasks) != 2 {
		t.Fatalf("lease: %v %v", tasks, err)
	}
	status := 200
	for _, tk := range tasks {
		if err := q.Report(t.Context(), &downloader.Report{TaskID: tk.TaskID, Summary: downloader.Summary{HTTPStatus: &status, HasReachedOrigin: true}}); err != nil {
			t.Fatal(err)
		}
	}
	if d := depthOf(res[0].TaskID); d != 2 {
		t.Errorf("after the report: depth %d, want 2", d)
	}
}

// TestQueueMemoryPerDiscoveredURL states the local queue's heap per URL found and queued
// (pending: the state a discovered URL waits in), over the real store. Run by hand for
// docs/benchmarks.md:
//
//	DOWNLOADER_DISCOVER_LONG=1 go test -v -run '^TestQueueMemoryPerDiscoveredURL$' ./localqueue
func TestQueueMemoryPerDiscoveredURL(t *testing.T) {
	if testing.Short() || !isLong() {
		t.Skip("long: set DOWNLOADER_DISCOVER_LONG=1")
	}
	const n = 100_000
	for _, fresh := range []int{DefaultFreshRecordCount, -1} {
		t.Run(fmt.Sprintf("fresh_%d", fresh), func(t *testing.T) {
			s := embeddedtest.Open(t, filepath.Join(t.TempDir(), "store"))
			q, err := Open(t.Context(), s, Config{FreshRecordCount: fresh})
			if err != nil {
				t.Fatal(err)
			}
			heap := func() uint64 {
				runtime.GC()
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				return m.HeapAlloc
			}
			before := heap()
			batch := make([]downloader.Task, 0, 1000)
			for i := range n {
				batch = append(batch, downloader.Task{URL: fmt.Sprintf("http://h%d.big.test/p/%d", i%50, i), ShouldStore: true})
				if len(batch) == cap(batch) {
					if _, err := q.SubmitAtDepth(t.Context(), batch, 1+i%5); err != nil {
						t.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			after := heap()
			t.Logf("%d URLs queued on 50 domains, FreshRecordCount %d: heap %+.2f MiB, %.0f B per URL",
				n, fresh, float64(int64(after)-int64(before))/(1<<20), float64(int64(after)-int64(before))/n)
			runtime.KeepAlive(q)
		})
	}
}

func isLong() bool { return os.Getenv("DOWNLOADER_DISCOVER_LONG") != "" }

package tikv

import (
	"flag"
	"testing"
	"time"

	"go.uber.org/goleak"

	"downloader/store/storetest"
	"downloader/store/tikv/tikvtest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if tikvtest.IsBenchmarkRun() {
		tikvtest.InitBenchmark()
	} else if err := tikvtest.Init(); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m, tikvtest.IgnoreClosedCluster)
}

// openStore opens a store over a fresh client of c, closed when t ends.
func openStore(t testing.TB, c *tikvtest.Cluster) (*Store, *tikvtest.Client) {
	t.Helper()
	return openStoreWith(t, c, Options{})
}

// openStoreWith is openStore with o.
func openStoreWith(t testing.TB, c *tikvtest.Cluster, o Options) (*Store, *tikvtest.Client) {
	t.Helper()
	cl := c.NewClient(t)
	s, err := New(cl.KV, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, cl
}

// mockOpTimeout bounds each operation of the store suite on client-go's in-process mock.
// DefaultOpTimeout (10 s, and a second per MiB of a page) is sized for a real TiKV; the
// mock is served by the test's own process under the race detector, which accounts for
// every byte the mock copies (its LevelDB journal and tables: 70 % of the case's CPU).
// The suite's largest operation, the 5 MiB page of Pages/Large (about 3 MB compressed),
// makes the case cost about 2.5 CPU-s; it takes 1.3-1.7 s alone on the idle machine, but
// 15-21 s at load 25 and 38 s at load 28-36 (2 cores), where the process got 7 % of a core;
// on DefaultOpTimeout it failed at load 31-42 ("result undetermined", "unavailable"). Two
// minutes is three times the longest seen; go test's -timeout stays the bound of a hang.
const mockOpTimeout = 2 * time.Minute

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Stores {
		s, _ := openStoreWith(t, tikvtest.NewCluster(t), Options{OpTimeout: mockOpTimeout})
		return storetest.Stores{Settings: s, Results: s, Pages: s}
	})
}

package tikv

import (
	"flag"
	"testing"

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
	cl := c.NewClient(t)
	s, err := New(cl.KV, Options{})
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

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Stores {
		s, _ := openStore(t, tikvtest.NewCluster(t))
		return storetest.Stores{Settings: s, Results: s, Pages: s}
	})
}

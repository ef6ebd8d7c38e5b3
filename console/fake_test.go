package console

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/internal/testkit"
	"downloader/limiter"
	"downloader/observe"
)

// Fakes of the console's dependencies (deps.go): structs of function fields, so a test
// sets only the calls it expects. The fakes the server shares are in internal/testkit.

type fakeLimiterStats struct {
	StatsFn func(now time.Time) downloader.RuntimeStats
}

func (f *fakeLimiterStats) Stats(now time.Time) downloader.RuntimeStats { return f.StatsFn(now) }

type fakeGate struct {
	InFlightFn, WaitingFn, QueueLengthFn func() int
}

func (f *fakeGate) InFlight() int    { return f.InFlightFn() }
func (f *fakeGate) Waiting() int     { return f.WaitingFn() }
func (f *fakeGate) QueueLength() int { return f.QueueLengthFn() }

var (
	_ SettingsService = (*testkit.SettingsService)(nil)
	_ LimiterStats    = (*fakeLimiterStats)(nil)
	_ GateView        = (*fakeGate)(nil)
	_ ClusterView     = (*testkit.ClusterView)(nil)
)

// TestPagesOnFakes: the runtime and stats numbers come from the dependencies they name,
// with no engine behind them.
func TestPagesOnFakes(t *testing.T) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	con, err := New(Config{Clock: clk, Observer: observe.New(observe.Config{Clock: clk}), Domains: observe.NewDomainTable(lim, 0),
		Settings: &testkit.SettingsService{
			SettingsFn:           func() downloader.Settings { return downloader.Settings{MaxConcurrentCount: 11} },
			DefaultMinIntervalFn: func() time.Duration { return 2 * time.Second },
		},
		Limiter: &fakeLimiterStats{StatsFn: func(time.Time) downloader.RuntimeStats {
			return downloader.RuntimeStats{DomainCount: 4, InFlightCount: 2}
		}},
		Gate: &fakeGate{InFlightFn: func() int { return 3 }, WaitingFn: func() int { return 1 }, QueueLengthFn: func() int { return 5 }},
		Cluster: &testkit.ClusterView{InstanceIDFn: func() string { return "dl-9" },
			InstancesFn: func(context.Context) ([]downloader.ClusterInstance, error) {
				return []downloader.ClusterInstance{{InstanceID: "dl-9", IsLive: true}, {InstanceID: "dl-8"}}, nil
			}},
		Egress: func(time.Time) (downloader.EgressState, bool) {
			return downloader.EgressState{IsUnavailable: true}, true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rt := con.RuntimeOf(t.Context())
	if rt.DomainCount != 4 || rt.InFlightCount != 2 || rt.MaxConcurrentCount != 11 || rt.DefaultMinIntervalMs != 2000 ||
		rt.Egress == nil || !rt.Egress.IsUnavailable {
		t.Errorf("runtime = %+v", rt)
	}
	if rt.Cluster == nil || rt.Cluster.InstanceID != "dl-9" || rt.Cluster.LiveInstanceCount != 1 || len(rt.Cluster.Instances) != 2 {
		t.Errorf("cluster = %+v", rt.Cluster)
	}
	if st := con.Stats(); st.GlobalInFlightCount != 3 || st.QueuedCount != 1 || st.LocalQueueLength != 5 || st.MaxConcurrentCount != 11 {
		t.Errorf("stats = %+v", st)
	}
}

// TestSettingsFormStatus: the form answers a failed change with the status of its error
// code, from the one map the API uses too (httpjson.Status).
func TestSettingsFormStatus(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"invalid", downloader.Errorf(downloader.EINVALID, "too many"), http.StatusBadRequest},
		{"unavailable", downloader.Errorf(downloader.EUNAVAILABLE, "store down"), http.StatusServiceUnavailable},
		{"internal", errors.New("disk on fire"), http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.NewFake(t0)
			lim := limiter.New(clk)
			con, err := New(Config{Clock: clk, Observer: observe.New(observe.Config{Clock: clk}), Domains: observe.NewDomainTable(lim, 0),
				Settings: &testkit.SettingsService{
					SetSettingsFn: func(context.Context, downloader.Settings, string) (downloader.Settings, error) {
						return downloader.Settings{}, tt.err
					},
				},
				Limiter: &fakeLimiterStats{},
				Gate:    &fakeGate{},
			})
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodPost, "/console/settings", strings.NewReader("max_concurrent_count=3"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			rec := httptest.NewRecorder()
			con.settingsForm().ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Errorf("status = %d, want %d (%s)", rec.Code, tt.want, rec.Body)
			}
		})
	}
}

package server

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/internal/testkit"
)

// Fakes of the server's dependencies (deps.go): structs of function fields, so a test
// sets only the calls it expects; an unexpected call panics with a nil function. The
// fakes the console shares are in internal/testkit.

type fakeProber struct {
	ProbeFn func(ctx context.Context, req downloader.Request, u *url.URL) downloader.Summary
}

func (f *fakeProber) Probe(ctx context.Context, req downloader.Request, u *url.URL) downloader.Summary {
	return f.ProbeFn(ctx, req, u)
}

type fakeRenderer struct {
	RenderFn func(ctx context.Context, req downloader.Request, u *url.URL) (*downloader.Answer, error)
}

func (f *fakeRenderer) Render(ctx context.Context, req downloader.Request, u *url.URL) (*downloader.Answer, error) {
	return f.RenderFn(ctx, req, u)
}

type fakeDomains struct {
	DomainFn func(now time.Time, domain string) (downloader.DomainState, bool)
}

func (f *fakeDomains) Domain(now time.Time, domain string) (downloader.DomainState, bool) {
	return f.DomainFn(now, domain)
}

type fakeSlots struct {
	InFlightFn func() int
	CapacityFn func() int
}

func (f *fakeSlots) InFlight() int { return f.InFlightFn() }
func (f *fakeSlots) Capacity() int { return f.CapacityFn() }

var (
	_ Prober          = (*fakeProber)(nil)
	_ Renderer        = (*fakeRenderer)(nil)
	_ SettingsService = (*testkit.SettingsService)(nil)
	_ DomainView      = (*fakeDomains)(nil)
	_ ClusterView     = (*testkit.ClusterView)(nil)
	_ SlotView        = (*fakeSlots)(nil)
)

// TestHandlersOnFakes checks what the handlers hand their dependencies and how they
// answer what comes back, with no engine behind them.
func TestHandlersOnFakes(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
	var probed downloader.Request
	settings := &testkit.SettingsService{
		SettingsFn:           func() downloader.Settings { return downloader.Settings{MaxConcurrentCount: 9} },
		DefaultMinIntervalFn: func() time.Duration { return 1500 * time.Millisecond },
	}
	cfg := Config{Clock: clk, Settings: settings,
		Probe: &fakeProber{ProbeFn: func(_ context.Context, req downloader.Request, _ *url.URL) downloader.Summary {
			probed = req
			return downloader.Summary{Domain: req.Domain}
		}},
		Render: &fakeRenderer{RenderFn: func(context.Context, downloader.Request, *url.URL) (*downloader.Answer, error) {
			return nil, &downloader.OverLimitError{Reason: downloader.FailSelfRateLimited, RetryAfter: 2500 * time.Millisecond}
		}},
		Domains: &fakeDomains{DomainFn: func(time.Time, string) (downloader.DomainState, bool) { return downloader.DomainState{}, false }},
		Cluster: &testkit.ClusterView{
			InstanceIDFn: func() string { return "dl-1" },
			InstancesFn: func(context.Context) ([]downloader.ClusterInstance, error) {
				return nil, downloader.Errorf(downloader.EUNAVAILABLE, "tikv unreachable")
			},
			DomainFn: func(context.Context, string) (downloader.ClusterDomain, error) {
				return downloader.ClusterDomain{}, nil
			},
		},
		Slots: &fakeSlots{},
	}
	srv := New(cfg)
	do := func(method, path, body string) (int, string, map[string]any) {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		var m map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &m)
		return rec.Code, rec.Header().Get("Retry-After"), m
	}

	if code, _, m := do("POST", "/v1/probe", `{"url":"http://A.test/x","should_render":true}`); code != 200 || m["domain"] != "a.test" {
		t.Errorf("probe: %d %v", code, m)
	}
	if probed.Domain != "a.test" || probed.MinInterval != 1500*time.Millisecond ||
		probed.IntervalSource != downloader.IntervalSourceDefault || !probed.ShouldRender {
		t.Errorf("probe handed over %+v", probed)
	}
	if code, retry, m := do("POST", "/v1/render", `{"url":"http://a.test/"}`); code != 429 || retry != "3" ||
		m["retry_after_seconds"] != float64(3) || m["fail_reason"] != string(downloader.FailSelfRateLimited) {
		t.Errorf("render over the limit: %d Retry-After %q %v", code, retry, m)
	}
	if code, _, m := do("GET", "/v1/domains/a.test", ""); code != 404 {
		t.Errorf("unknown domain: %d %v", code, m)
	}
	if code, _, m := do("GET", "/v1/cluster", ""); code != 503 || m["error"] != "tikv unreachable" {
		t.Errorf("cluster view down: %d %v", code, m)
	}
	if code, _, m := do("GET", "/v1/settings", ""); code != 200 || m["max_concurrent_count"] != float64(9) {
		t.Errorf("settings: %d %v", code, m)
	}
}

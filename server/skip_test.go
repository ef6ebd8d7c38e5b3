package server

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/engine"
	"downloader/internal/testkit"
	"downloader/limiter"
)

// optsRenderer records the options of every render it is asked for.
type optsRenderer struct {
	mu   sync.Mutex
	opts []downloader.RenderOptions
}

func (r *optsRenderer) AcquireSlot(ctx context.Context) (func(), *downloader.Outcome) {
	return func() {}, nil
}

func (r *optsRenderer) RenderInSlot(ctx context.Context, u *url.URL, adm *limiter.Admission, _ limiter.HopAdmitter, opts downloader.RenderOptions) *downloader.Outcome {
	r.mu.Lock()
	r.opts = append(r.opts, opts)
	r.mu.Unlock()
	n := 1
	return &downloader.Outcome{HTTPStatus: 200, RawTextLength: &n, TextLength: &n}
}

var _ engine.Renderer = (*optsRenderer)(nil)

// TestRenderSkipResourceTypes: skip_resource_types reaches the renderer as asked: absent
// is nil (the renderer's default), [] is an empty list (load everything), duplicates go.
func TestRenderSkipResourceTypes(t *testing.T) {
	clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
	lim := limiter.New(clk)
	clk.Advance(time.Hour)
	r := &optsRenderer{}
	eng := engine.New(engine.Config{Clock: clk, Limiter: lim, Gate: limiter.NewGate(4, 2), Fetcher: &fakeFetcher{clk: clk},
		Renderer: r, Settings: &testkit.SettingsStore{}, DefaultMinInterval: time.Second, DefaultTimeout: 5 * time.Second})
	h := &harness{clk: clk, eng: eng, srv: New(Config{Probe: eng, Render: eng, Settings: eng, Domains: lim, Clock: clk})}
	tests := []struct {
		body string
		want []downloader.ResourceType
	}{
		{`{"url":"http://a%d.test/"}`, nil},
		{`{"url":"http://a%d.test/","skip_resource_types":[]}`, []downloader.ResourceType{}},
		{`{"url":"http://a%d.test/","skip_resource_types":["font","script","font"]}`, []downloader.ResourceType{"font", "script"}},
	}
	for i, tt := range tests {
		body := fmtURL(tt.body, i)
		rec, m := h.do(t, "POST", "/v1/render", body)
		if rec.Code != 200 {
			t.Fatalf("%s: status %d %v", body, rec.Code, m)
		}
		r.mu.Lock()
		got := r.opts[len(r.opts)-1].SkipResourceTypes
		r.mu.Unlock()
		if (got == nil) != (tt.want == nil) || !slices.Equal(got, tt.want) {
			t.Errorf("%s: renderer got %#v, want %#v", body, got, tt.want)
		}
	}
}

func fmtURL(body string, i int) string {
	return strings.Replace(body, "%d", string(rune('0'+i)), 1)
}

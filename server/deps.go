package server

import (
	"context"
	"net/url"
	"time"

	"downloader"
)

// The server depends on these small interfaces, declared here where they are used, and
// not on the engine as a whole: each handler sees only what it needs, tests can give it a
// fake (fake_test.go), and cmd/downloader wires the real ones (the engine, the limiter,
// the gate, store/tikv's runtime, the egress detector).

// Prober runs entry C (engine.Engine): the lean summary, never an error (SPEC §5).
type Prober interface {
	Probe(ctx context.Context, req downloader.Request, u *url.URL) downloader.Summary
}

// Renderer runs entry B (engine.Engine): the result, a *downloader.OverLimitError when the
// request is over the limit (a 429), or an error to answer.
type Renderer interface {
	Render(ctx context.Context, req downloader.Request, u *url.URL) (*downloader.Answer, error)
}

// SettingsService reads and changes the runtime settings (engine.Engine). SetSettings
// returns an EINVALID error naming the field for a bad value.
type SettingsService interface {
	Settings() downloader.Settings
	SetSettings(ctx context.Context, s downloader.Settings, actor string) (old downloader.Settings, err error)
	// DefaultMinInterval applies when B or C gives no min_interval_ms.
	DefaultMinInterval() time.Duration
}

// DomainView is this instance's limiter (limiter.Limiter): one domain's entry of
// downloader:domain_runtime, ok false when the limiter does not know the domain.
type DomainView interface {
	Domain(now time.Time, domain string) (st downloader.DomainState, ok bool)
}

// ClusterView is the cluster-wide view of the shared runtime (store/tikv's Runtime) in
// cluster mode. Errors are EUNAVAILABLE when TiKV cannot be reached.
type ClusterView interface {
	InstanceID() string
	Instances(ctx context.Context) ([]downloader.ClusterInstance, error)
	Domain(ctx context.Context, domain string) (downloader.ClusterDomain, error)
}

// SlotView is this instance's global cap (limiter.Gate), shown as the one local instance
// of GET /v1/cluster on the embedded store.
type SlotView interface {
	InFlight() int
	Capacity() int
}

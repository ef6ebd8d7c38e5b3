package console

import (
	"context"
	"time"

	"downloader"
)

// The console depends on these small interfaces, declared here where they are used, and
// not on the engine as a whole: a page reads only what it shows, tests can give it a fake
// (fake_test.go), and cmd/downloader wires the real ones (the engine, the limiter, the
// gate, store/tikv's runtime, the egress detector).

// SettingsService reads and changes the runtime settings (engine.Engine). SetSettings
// returns an EINVALID error naming the field for a bad value.
type SettingsService interface {
	Settings() downloader.Settings
	SetSettings(ctx context.Context, s downloader.Settings, actor string) (old downloader.Settings, err error)
	// DefaultMinInterval applies when B or C gives no min_interval_ms.
	DefaultMinInterval() time.Duration
}

// LimiterStats is this instance's limiter (limiter.Limiter): its counts at now.
type LimiterStats interface {
	Stats(now time.Time) downloader.RuntimeStats
}

// GateView is this instance's global cap (limiter.Gate): the slots in use, the requests
// waiting for one, and how many may wait.
type GateView interface {
	InFlight() int
	Waiting() int
	QueueLength() int
}

// ClusterView is the cluster's instance list (store/tikv's Runtime) in cluster mode.
type ClusterView interface {
	InstanceID() string
	Instances(ctx context.Context) ([]downloader.ClusterInstance, error)
}

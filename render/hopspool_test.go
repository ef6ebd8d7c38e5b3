package render

import (
	"context"
	"net/url"
	"time"

	"downloader"
	"downloader/limiter"
)

// hopsPool is a pool whose tests' renders each pass the pool's hop admitter per call, the
// one way an admitter reaches a render (as the engine passes its own to RenderInSlot):
// Render and RenderWith here stand for the pool's, with hops. The pool is made with
// Config.ShouldAdmitHops when hops is set.
type hopsPool struct {
	*Pool
	hops HopAdmitter
}

// newHopsPool makes a pool of cfg and sm whose renders are given hops (nil: the pool
// admits none and pauses nothing, as Config.ShouldAdmitHops false).
func newHopsPool(cfg Config, sm seams, hops HopAdmitter) (hopsPool, error) {
	if hops != nil {
		cfg.ShouldAdmitHops = true
	}
	p, err := newPool(cfg, sm)
	return hopsPool{Pool: p, hops: hops}, err
}

// Render is Pool.Render with the pool's hop admitter.
func (p hopsPool) Render(ctx context.Context, u *url.URL, adm *limiter.Admission, timeout time.Duration) *downloader.Outcome {
	return p.renderTimed(ctx, u, adm, p.hops, downloader.RenderOptions{Timeout: timeout}, false)
}

// RenderWith is Pool.RenderWith with the pool's hop admitter.
func (p hopsPool) RenderWith(ctx context.Context, u *url.URL, adm *limiter.Admission, opts downloader.RenderOptions) *downloader.Outcome {
	return p.renderTimed(ctx, u, adm, p.hops, opts, false)
}

// renderer is what the tests' render helper needs of a pool: a Pool, or a hopsPool.
type renderer interface {
	Render(ctx context.Context, u *url.URL, adm *limiter.Admission, timeout time.Duration) *downloader.Outcome
}

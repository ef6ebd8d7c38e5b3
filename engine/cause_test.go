package engine

import (
	"context"
	"net/url"
	"testing"

	"downloader"
	"downloader/limiter"
)

// causeChecked is a real fetcher (package fetch) with a check on everything it returns:
// a failed outcome must carry a failure's cause, and the reason that cause means, because
// the engine decides fail_reason from the cause (downloader.DecideFailReason).
type causeChecked struct {
	t *testing.T
	f Fetcher
}

func (c causeChecked) FetchWith(ctx context.Context, u *url.URL, adm *limiter.Admission, hops limiter.HopAdmitter, opts downloader.FetchOptions) *downloader.Outcome {
	return c.check(u, c.f.FetchWith(ctx, u, adm, hops, opts))
}

func (c causeChecked) check(u *url.URL, out *downloader.Outcome) *downloader.Outcome {
	c.t.Helper()
	switch {
	case out.Cause == downloader.CauseReported:
		c.t.Errorf("%s: the fetcher gave no cause (fail_reason %q)", u, out.FailReason)
	case out.Cause.FailReason() != out.FailReason:
		c.t.Errorf("%s: the fetcher gave cause %s but fail_reason %q", u, out.Cause, out.FailReason)
	}
	return out
}

package engine

import (
	"context"
	"net/url"
	"testing"
	"time"

	"downloader"
	"downloader/limiter"
)

// TestStopCancelsRequestsInFlight: Stop cancels the context of every request on the wire
// (the engine's stop context, which each request's context follows), and what was cut
// short by our stop answers shutting_down (C) or goes back unrun (A), never as the
// origin's failure.
func TestStopCancelsRequestsInFlight(t *testing.T) {
	for _, entry := range []downloader.Entry{downloader.EntryProbe, downloader.EntryLease} {
		t.Run(string(entry), func(t *testing.T) {
			e, _, _, _ := newTestEngine(t)
			e.cfg.DefaultTimeout = time.Hour // no timeout ends the request: only the stop can
			started := make(chan struct{})
			e.cfg.Fetcher = fetcherFunc(func(ctx context.Context, _ *url.URL, _ *limiter.Admission, _ limiter.HopAdmitter) *downloader.Outcome {
				close(started)
				<-ctx.Done()
				return downloader.FailedBy(downloader.CauseConnectionReset)
			})
			done := make(chan struct{})
			go func() {
				defer close(done)
				u, _ := url.Parse("http://a.test/")
				switch entry {
				case downloader.EntryProbe:
					s := e.Probe(context.Background(), downloader.Request{URL: u.String(), Domain: "a.test"}, u)
					if s.FailReason == nil || *s.FailReason != downloader.FailShuttingDown {
						t.Errorf("probe cut short by the stop: %+v, want shutting_down", s)
					}
				default:
					out := e.RunTask(context.Background(), &downloader.Task{TaskID: "x", URL: u.String(), MinIntervalMs: ms(0)})
					if !out.Release {
						t.Errorf("task cut short by the stop: %+v, want release", out)
					}
				}
			}()
			<-started
			e.Stop()
			<-done
		})
	}
}

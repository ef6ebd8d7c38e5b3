package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"downloader/clock"
	"downloader/limiter"
	"downloader/store/embedded"
)

// heartbeatPeriod is how often the service records its sign of life in the data dir: after
// a crash, the next start counts the limiter's table as lost at the last one (plus two
// periods), so a domain waits at most one interval from the crash, not from the restart.
const heartbeatPeriod = time.Second

// restoreRuntime applies what the previous process left of downloader:domain_runtime to
// the limiter (SPEC §2, loss and rebuild): a clean stop's entries exactly, a crash's loss
// at its last heartbeat, nothing for a data dir that never served. In cluster mode the
// table lives in TiKV and the local limiter keeps its conservative start; the data dir's
// record is still renewed, so that a later start on the embedded store cannot take an
// old clean stop for the last word.
func restoreRuntime(ctx context.Context, st *embedded.Store, lim *limiter.Limiter, clk clock.Clock, isCluster bool, logger *slog.Logger) error {
	now := clk.Now()
	start, err := st.StartRuntime(ctx, now)
	if err != nil {
		return fmt.Errorf("read domain_runtime: %w", err)
	}
	attrs := []any{"runtime_start", string(start.Kind)}
	switch {
	case isCluster:
		attrs = append(attrs, "store_backend", storeTiKV)
	case start.Kind == embedded.RuntimeFresh:
		lim.SetLoss(time.Time{})
	case start.Kind == embedded.RuntimeCleanStop:
		lim.Restore(now, start.Snapshot)
		attrs = append(attrs, "entry_count", len(start.Snapshot.Entries), "saved_at", start.Snapshot.SavedAt)
	case start.Kind == embedded.RuntimeCrashed:
		lim.RestoreAfterCrash(now, start.LastHeartbeatAt, heartbeatPeriod)
		attrs = append(attrs, "last_heartbeat_at", start.LastHeartbeatAt)
	default: // unknown: the table counts as lost now, as New made it
	}
	if loss, ok := lim.LossAt(); ok {
		attrs = append(attrs, "loss_at", loss.UTC())
	}
	logger.Info("domain_runtime restored", attrs...)
	return nil
}

// runHeartbeat records a heartbeat every heartbeatPeriod until ctx ends. A failed or slow
// write is logged: while heartbeats fail, a crash would be counted from the last one that
// succeeded, earlier than the truth.
func runHeartbeat(ctx context.Context, st *embedded.Store, clk clock.Clock, logger *slog.Logger) {
	for {
		start := clk.Now()
		if err := st.Heartbeat(ctx, start); err != nil {
			if ctx.Err() != nil {
				return
			}
			logger.Warn("heartbeat failed", "error", err)
		} else if took := clk.Now().Sub(start); took > heartbeatPeriod {
			logger.Warn("heartbeat slow", "elapsed_ms", took.Milliseconds())
		}
		if err := clock.Sleep(ctx, clk, heartbeatPeriod); err != nil {
			return
		}
	}
}

// saveRuntime keeps, at a clean stop, the limiter's entries that can still refuse a
// request, for the next start. Call it once nothing is sent any more. A failure leaves
// the last heartbeat to decide, as after a crash: safe, only longer.
func saveRuntime(ctx context.Context, st *embedded.Store, lim *limiter.Limiter, clk clock.Clock, logger *slog.Logger) {
	snap := lim.Save(clk.Now())
	if err := st.SaveRuntime(ctx, snap); err != nil {
		logger.Error("saving domain_runtime failed: the next start counts it as lost at the last heartbeat", "error", err)
		return
	}
	logger.Info("domain_runtime saved", "entry_count", len(snap.Entries))
}

package engine

import (
	"context"
	"fmt"

	"downloader"
)

// MaxConcurrentCountLimit bounds max_concurrent_count: above it the value is a typo, not a
// brake.
const MaxConcurrentCountLimit = 100_000

// CheckMaxConcurrentCount checks a max_concurrent_count value.
func CheckMaxConcurrentCount(n int) error {
	if n < 1 || n > MaxConcurrentCountLimit {
		return downloader.Invalidf("max_concurrent_count", "max_concurrent_count must be between 1 and %d", MaxConcurrentCountLimit)
	}
	return nil
}

// LoadSettings applies the stored settings at start-up. A value changed online survives a
// restart and wins over the flag (the flag only seeds a fresh data dir): the online change
// is the operator's latest word.
func (e *Engine) LoadSettings(ctx context.Context) error {
	if e.cfg.Settings == nil {
		return nil
	}
	s, ok, err := e.cfg.Settings.Settings(ctx)
	if err != nil {
		return fmt.Errorf("load settings: %w", err)
	}
	if !ok {
		return nil
	}
	if err := CheckMaxConcurrentCount(s.MaxConcurrentCount); err != nil {
		e.log.Warn("stored max_concurrent_count out of range: ignored", "max_concurrent_count", s.MaxConcurrentCount)
		return nil
	}
	if e.cfg.Shared != nil {
		// Cluster mode: the value is the cluster's; this instance takes its share of it.
		e.cfg.Shared.ApplyMaxConcurrentCount(s.MaxConcurrentCount)
		return nil
	}
	if flag := e.cfg.Gate.Capacity(); flag != s.MaxConcurrentCount {
		e.log.Info("max_concurrent_count from the data dir overrides the flag", "max_concurrent_count", s.MaxConcurrentCount, "flag_max_concurrent_count", flag)
	}
	e.cfg.Gate.SetCapacity(s.MaxConcurrentCount)
	return nil
}

// Settings returns the settings in force.
func (e *Engine) Settings() downloader.Settings {
	if e.cfg.Shared != nil {
		return downloader.Settings{MaxConcurrentCount: e.cfg.Shared.MaxConcurrentCount()}
	}
	return downloader.Settings{MaxConcurrentCount: e.cfg.Gate.Capacity()}
}

// SetSettings changes the settings at once, for requests already waiting too, and stores
// them so that they survive a restart. actor says who asked, for the log.
func (e *Engine) SetSettings(ctx context.Context, s downloader.Settings, actor string) (old downloader.Settings, err error) {
	if err := CheckMaxConcurrentCount(s.MaxConcurrentCount); err != nil {
		return downloader.Settings{}, err
	}
	old = e.Settings()
	if e.cfg.Settings != nil {
		if err := e.cfg.Settings.SaveSettings(ctx, s); err != nil {
			return old, fmt.Errorf("save settings: %w", err)
		}
	}
	if e.cfg.Shared != nil {
		e.cfg.Shared.ApplyMaxConcurrentCount(s.MaxConcurrentCount)
	} else {
		e.cfg.Gate.SetCapacity(s.MaxConcurrentCount)
	}
	e.log.Info("settings changed", "actor", actor, "old_max_concurrent_count", old.MaxConcurrentCount,
		"max_concurrent_count", s.MaxConcurrentCount, "changed_at", e.cfg.Clock.Now().UTC())
	return old, nil
}

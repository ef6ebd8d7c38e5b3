package tikv

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader"
	"downloader/store/keys"
)

var settingsKey = []byte(keys.Settings)

// Settings returns the stored settings; ok is false when none were ever saved. They are
// the cluster's: every instance reads the same record.
func (s *Store) Settings(ctx context.Context) (downloader.Settings, bool, error) {
	ctx, release, err := s.acquire(ctx, "settings")
	if err != nil {
		return downloader.Settings{}, false, err
	}
	defer release()
	st, ok, err := s.settings(ctx)
	if err != nil {
		return downloader.Settings{}, false, unavailable("settings", err)
	}
	return st, ok, nil
}

// settings reads the settings; the caller holds the store open.
func (s *Store) settings(ctx context.Context) (downloader.Settings, bool, error) {
	v, ok, err := s.get(ctx, settingsKey)
	if err != nil || !ok {
		return downloader.Settings{}, false, err
	}
	var st downloader.Settings
	if err := json.Unmarshal(v, &st); err != nil {
		return downloader.Settings{}, false, fmt.Errorf("decode settings: %w", err)
	}
	return st, true, nil
}

// SaveSettings replaces the stored settings. It returns once they are committed; every
// instance's Runtime picks them up at its next heartbeat (docs/deploy.md).
func (s *Store) SaveSettings(ctx context.Context, st downloader.Settings) error {
	ctx, release, err := s.acquire(ctx, "save settings")
	if err != nil {
		return err
	}
	defer release()
	v, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("tikv store: encode settings: %w", err)
	}
	// Concurrent saves conflict; the last to commit wins, as on one machine.
	err = s.update(ctx, func(txn *transaction.KVTxn) error { return txn.Set(settingsKey, v) })
	if err != nil {
		return unavailable("save settings", err)
	}
	return nil
}

package embedded

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/store/keys"
)

// settingsKey holds the one Settings record.
var settingsKey = []byte(keys.Settings)

// Settings returns the stored settings; ok is false when none were ever saved.
func (s *Store) Settings(ctx context.Context) (downloader.Settings, bool, error) {
	release, err := s.acquire(ctx, "settings")
	if err != nil {
		return downloader.Settings{}, false, err
	}
	defer release()
	v, ok, err := s.get(settingsKey)
	if err != nil || !ok {
		return downloader.Settings{}, false, err
	}
	var st downloader.Settings
	if err := json.Unmarshal(v, &st); err != nil {
		return downloader.Settings{}, false, fmt.Errorf("embedded store: decode settings: %w", err)
	}
	return st, true, nil
}

// SaveSettings replaces the stored settings. It returns once they are durable: a setting
// changed online must survive a restart (SPEC §2, max_concurrent_count).
func (s *Store) SaveSettings(ctx context.Context, st downloader.Settings) error {
	release, err := s.acquire(ctx, "save settings")
	if err != nil {
		return err
	}
	defer release()
	v, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("embedded store: encode settings: %w", err)
	}
	if err := s.db.Set(settingsKey, v, pebble.Sync); err != nil {
		return fmt.Errorf("embedded store: save settings: %w", err)
	}
	return nil
}

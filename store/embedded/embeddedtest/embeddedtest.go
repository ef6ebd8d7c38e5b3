// Package embeddedtest opens the real embedded store for the tests of the packages that
// keep their data in it (the local queue, the outbox, the task writes).
package embeddedtest

import (
	"log/slog"
	"testing"

	"downloader/store/embedded"
)

// Open opens the embedded store in dir, closed (and checked) when t ends.
func Open(t testing.TB, dir string) *embedded.Store {
	t.Helper()
	s, err := embedded.Open(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

package localqueue

import (
	"log/slog"
	"testing"

	"go.uber.org/goleak"

	"downloader/store/embedded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func openTest(t *testing.T, dir string) *embedded.Store {
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

package render

import (
	"log/slog"
	"testing"
	"time"

	"downloader/clock"
)

// TestCloseDuringLaunch: a pool closed while its browser is still starting returns from
// Close (a service stopped right after it started used to hang there for ever: chromedp's
// cancel, called twice, waited for an allocation token the first call had taken).
func TestCloseDuringLaunch(t *testing.T) {
	f := getFixture(t)
	for range 3 {
		p, err := New(Config{Clock: clock.Real{}, Logger: slog.New(slog.DiscardHandler), Concurrency: 1,
			UserAgent: testUserAgent, Guard: f.guard})
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan error, 1)
		go func() { closed <- p.Close() }()
		select {
		case <-closed:
		case <-time.After(60 * time.Second): // a bound on a hang, not a pause
			t.Fatal("Close did not return while the browser was launching")
		}
	}
}

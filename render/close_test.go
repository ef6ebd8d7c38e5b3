package render

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"downloader"
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

// TestCleanCloseIsNotALoss: closing a pool whose browser is up logs no "renderer lost"
// (Close ends the browser and the pool together; the loss branch must not take it).
func TestCleanCloseIsNotALoss(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	f := getFixture(t)
	for range 3 {
		var logs lockedLog
		p, err := New(Config{Clock: clock.Real{}, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Concurrency: 1,
			UserAgent: testUserAgent, Guard: f.guard})
		if err != nil {
			t.Fatal(err)
		}
		if out := p.Render(t.Context(), f.url("js.test/"), nil, 30*time.Second); out.FailReason == downloader.FailRendererUnavailable {
			t.Fatalf("render: %+v", out)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if s := logs.String(); strings.Contains(s, "renderer lost") {
			t.Errorf("a clean close logged a loss:\n%s", s)
		}
	}
}

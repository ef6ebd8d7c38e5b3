package testkit

import (
	"log/slog"
	"strings"
	"testing"
)

// Logger is a text logger writing to t's log from level up: printed for a test that fails
// (or under -v), kept out of a passing test's output. What it logs must end before t does
// (a component closed in t's cleanup).
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: level}))
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

package main

import (
	"context"
	"strings"
	"testing"
)

// TestSoakSmoke runs `downloader soak` for a few seconds (the 10-minute soak is run by hand:
// docs/reliability.md): mixed A/B/C load with renders and a browser kill, then the
// summary. Violations and lost tasks must be 0; flatness is only printed, as a few seconds
// prove nothing about it.
func TestSoakSmoke(t *testing.T) {
	var stdout, stderr syncBuffer
	err := run(context.Background(), []string{"soak", "--duration-seconds", "15", "--sample-seconds", "1",
		"--domain-count", "20", "--tasks-per-second", "10", "--task-render-percent", "5", "--renders-per-second", "2",
		"--probes-per-second", "5", "--kill-after-render-count", "6", "--drain-seconds", "30"}, noEnv, &stdout, &stderr)
	out := squash(stdout.String())
	t.Log(stdout.String())
	if err != nil && (strings.Contains(err.Error(), "violations") || strings.Contains(err.Error(), "lost") ||
		strings.Contains(err.Error(), "interrupted") || !strings.Contains(err.Error(), "soak failed")) {
		t.Fatalf("soak: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"soak summary", "lost tasks 0", "violations 0", "browser kills", "flatness"} {
		if !strings.Contains(out, want) {
			t.Errorf("the summary lacks %q", want)
		}
	}
	if strings.Contains(out, "browser kills 0 ") {
		t.Error("the browser was never killed")
	}
}

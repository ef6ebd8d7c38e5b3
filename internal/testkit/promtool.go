package testkit

import (
	"os"
	"os/exec"
	"testing"
)

// Promtool returns the path of Debian's promtool (package prometheus, installed by
// scripts/setup-test.sh). Without it the test is skipped on a developer's machine and fails in
// CI (CI=true), where setup-test.sh must have installed it.
func Promtool(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"promtool", "/usr/bin/promtool"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("promtool not found: scripts/setup.sh installs Debian's prometheus package, which ships it")
	}
	t.Skip("promtool not found (scripts/setup.sh installs it; in CI this is a failure)")
	return ""
}

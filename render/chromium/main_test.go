package chromium

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if parent := os.Getenv(profileChildEnv); parent != "" {
		os.Exit(profileDirChild(parent)) // a child of TestProfileDir*
	}
	goleak.VerifyTestMain(m)
}

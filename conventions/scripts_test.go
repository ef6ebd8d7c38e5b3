package conventions

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetupForRunningIsNotSetupForTesting: scripts/run.sh sets up only what the service
// runs on (scripts/setup.sh: no npm, no TodoMVC fixtures, no promtool); scripts/test.sh
// runs that and scripts/setup-test.sh, which holds the tests' own needs.
func TestSetupForRunningIsNotSetupForTesting(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "scripts", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	code := func(script string) string { // the script without its comments
		var out []string
		for _, l := range strings.Split(script, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "#") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	run, setup, setupTest, test := code(read("run.sh")), code(read("setup.sh")), code(read("setup-test.sh")), code(read("test.sh"))
	if !strings.Contains(run, "scripts/setup.sh") || strings.Contains(run, "setup-test.sh") {
		t.Errorf("run.sh must run scripts/setup.sh and not scripts/setup-test.sh:\n%s", run)
	}
	for _, testOnly := range []string{"npm", "todomvc", "prometheus"} {
		if strings.Contains(setup, testOnly) {
			t.Errorf("setup.sh (run by run.sh) installs %s, which only the tests need", testOnly)
		}
		if !strings.Contains(setupTest, testOnly) {
			t.Errorf("setup-test.sh does not install %s", testOnly)
		}
	}
	if !strings.Contains(test, "scripts/setup.sh") || !strings.Contains(test, "scripts/setup-test.sh") {
		t.Errorf("test.sh must run both setup scripts:\n%s", test)
	}
}

package chromium

import (
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// TestKillTree: a child's own children die with it (the case that kept the browser's
// output pipe open).
func TestKillTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 300 & sleep 300 & wait")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	var kids []int
	for len(kids) < 2 { // the shell forks its two sleeps right away
		kids = descendants(cmd.Process.Pid)
	}
	if err := killTree(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// SIGKILL is delivered asynchronously: wait (bounded) for the state to leave running.
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range kids {
		for {
			st := procState(k)
			if st == "" || st == "Z" || st == "X" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("descendant %d still alive (state %q)", k, st)
			}
			runtime.Gosched()
		}
	}
}

package chromium

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
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

// TestKillTreeWhileItForks: a tree that keeps forking while it is killed leaves no process
// alive once killTree returns (killed from one listing, the children forked between the
// listing and the kills were orphaned and lived on). The shell forks sleeps as fast as it
// can; each sleep's argument marks it as this test's.
func TestKillTreeWhileItForks(t *testing.T) {
	const mark = "301.25"
	cmd := exec.Command("sh", "-c", "while :; do sleep "+mark+" & done")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	for len(descendants(cmd.Process.Pid)) < 50 {
		runtime.Gosched()
	}
	if err := killTree(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if alive := processesWithArg(mark); len(alive) > 0 {
		t.Errorf("%d processes of the tree alive after killTree: %v", len(alive), alive)
	}
	cmd.Wait()
}

// processesWithArg lists the live processes (not zombies) with arg in their command line.
func processesWithArg(arg string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !slices.Contains(strings.Split(string(cmdline), "\x00"), arg) {
			continue
		}
		if st := procState(pid); st != "" && st != "Z" && st != "X" {
			pids = append(pids, pid)
		}
	}
	return pids
}

package faults

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"downloader/internal/procstat"
	"downloader/internal/testkit"
)

// tmpRoot is TMPDIR for the whole test binary and the programs it starts, so that every
// temporary directory (Chromium's user data directories above all) is under it and
// TestMain can check that none is left.
var tmpRoot string

func TestMain(m *testing.M) {
	var err error
	tmpRoot, err = os.MkdirTemp("", "faults-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("TMPDIR", tmpRoot)
	if err := startBuild(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	build.Stop()
	if code == 0 {
		code = checkNoLeftovers()
	}
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

// keptDirs are the temporary directories the suite keeps on purpose until the end (the
// built binary).
var keptDirs = map[string]bool{}

// checkNoLeftovers fails the run if a browser process, a temporary directory or a
// goroutine is left.
func checkNoLeftovers() int {
	code := 0
	if procs := ownBrowsers(); len(procs) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: browser processes left: %v\n", procs)
		code = 1
	}
	entries, _ := os.ReadDir(tmpRoot)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "go-build") || keptDirs[e.Name()] {
			continue
		}
		fmt.Fprintf(os.Stderr, "FAIL: temporary directory left: %s\n", filepath.Join(tmpRoot, e.Name()))
		code = 1
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: goroutines left: %v\n", err)
		code = 1
	}
	return code
}

// noLeaks checks, when t ends, that no goroutine started during t is left and that the
// process holds no more file descriptors than before t. Call it first in a test, so that
// its check runs after every other cleanup.
func noLeaks(t *testing.T) {
	t.Helper()
	before := fdCount()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if t.Failed() {
			return // the failure says more than a leak it may have caused
		}
		if err := goleak.Find(ignore); err != nil {
			t.Errorf("goroutines leaked: %v", err)
		}
		// Closed sockets leave the table as their last goroutines end; goleak has waited
		// for those, so a short settle is enough.
		if !testkit.Eventually(5*time.Second, func() bool { return fdCount() <= before }) {
			t.Errorf("file descriptors leaked: %d before, %d after: %v", before, fdCount(), fdList())
		}
	})
}

func fdCount() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(entries)
}

func fdList() []string {
	entries, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range entries {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+"→"+l)
	}
	return out
}

// ownBrowsers lists the Chromium processes this test binary started: those whose TMPDIR
// is tmpRoot, which every helper process inherits. (The test binaries of other packages
// share our process group when the whole suite runs, and run browsers of their own.)
func ownBrowsers() []int {
	want := []byte("TMPDIR=" + tmpRoot + "\x00")
	var pids []int
	for _, pid := range processesInGroup(-1, isBrowser) {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err == nil && bytes.Contains(append([]byte{0}, env...), append([]byte{0}, want...)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ownRenderers counts our browsers' renderer processes. Every render has a browser
// context of its own, and so a renderer process of its own: a tab or context left open
// behind a render stays as one. Chromium's helpers do not inherit TMPDIR (ownBrowsers'
// mark): they are found as descendants of our main browser processes.
func ownRenderers() int {
	ours := map[string]bool{}
	for _, pid := range ownBrowsers() {
		ours[strconv.Itoa(pid)] = true
	}
	parent := map[string]string{}
	var renderers []string
	for _, pid := range processesInGroup(-1, isBrowser) {
		id := strconv.Itoa(pid)
		if st := procstat.Fields(id); len(st) > 1 {
			parent[id] = st[1]
		}
		if cmdline, err := os.ReadFile("/proc/" + id + "/cmdline"); err == nil && bytes.Contains(cmdline, []byte("--type=renderer")) {
			renderers = append(renderers, id)
		}
	}
	n := 0
	for _, id := range renderers {
		for up, depth := parent[id], 0; up != "" && depth < 8; up, depth = parent[up], depth+1 {
			if ours[up] {
				n++
				break
			}
		}
	}
	return n
}

// browserProcesses lists the Chromium processes in process group pgrp (a downloader started
// by the restart tests gets a process group of its own, which its browser inherits).
func browserProcesses(pgrp int) []int { return processesInGroup(pgrp, isBrowser) }

func isBrowser(exe string) bool { return strings.Contains(filepath.Base(exe), "chrom") }

// processesInGroup lists the processes of process group pgrp (-1: any) whose executable
// matches.
func processesInGroup(pgrp int, match func(exe string) bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st := procstat.Fields(e.Name())
		if st == nil || (pgrp >= 0 && st[2] != strconv.Itoa(pgrp)) || st[0] == "Z" {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil || !match(exe) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

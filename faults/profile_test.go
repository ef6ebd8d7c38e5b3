package faults

import (
	"downloader/internal/testkit"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// profileDirs lists the browser user data directories of TMPDIR tmp: chromedp's own
// (chromedp-runner*, which only a clean close removes) and the pool's
// (downloader-renderer-{uid}/{pid}-*, render/profiledir.go).
func profileDirs(tmp string) (chromedpDirs, poolDirs []string) {
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "chromedp-runner") {
			chromedpDirs = append(chromedpDirs, e.Name())
		}
	}
	parent := filepath.Join(tmp, "downloader-renderer-"+strconv.Itoa(os.Getuid()))
	entries, _ = os.ReadDir(parent)
	for _, e := range entries {
		poolDirs = append(poolDirs, e.Name())
	}
	return chromedpDirs, poolDirs
}

// renderOnce asks c for one real render and fails t unless it succeeds.
func renderOnce(t *testing.T, c *child, host string) {
	t.Helper()
	status, m, err := c.post("/v1/render", `{"url":"http://`+host+`/","should_render":true,"min_interval_ms":0,"timeout_ms":60000}`)
	if err != nil || status != 200 || m["fail_reason"] != nil {
		t.Fatalf("render of %s: %d %v %v\n%s", host, status, m, err, c.stderr.String())
	}
}

// TestKill9LeavesNoBrowserProfile is the kill -9 gap (docs/reliability.md §6): the
// browser's user data directory of a downloader killed with SIGKILL is removed by the next
// start, the restarted one's live directory is kept, and a clean stop leaves TMPDIR empty.
//
// A browser that gets chromedp's own chromedp-runner* directory instead of one from
// render/profiledir.go fails it: that one a kill -9 leaves for ever.
func TestKill9LeavesNoBrowserProfile(t *testing.T) {
	noLeaks(t)
	o := restartOrigin(t)
	dataDir, tmp := t.TempDir(), t.TempDir()
	args := []string{"--connect-to", o.ConnectTo(), "--render-concurrency", "1", "--shutdown-grace-seconds", "2"}
	c := startChild(t, dataDir, tmp, args...)
	renderOnce(t, c, "first.test")
	old, dirs := profileDirs(tmp)
	if len(old) > 0 {
		c.stop(syscall.SIGKILL, 30*time.Second)
		os.RemoveAll(tmp)
		t.Fatalf("the browser got chromedp's own directory %v, not one from render/profiledir.go", old)
	}
	pid := c.cmd.Process.Pid
	if len(dirs) != 1 || !strings.HasPrefix(dirs[0], fmt.Sprint(pid)+"-") {
		t.Fatalf("profile directories %v, want one named after the downloader's pid %d", dirs, pid)
	}
	killed := dirs[0]
	c.stop(syscall.SIGKILL, 30*time.Second)
	if !testkit.Eventually(10*time.Second, func() bool { return len(browserProcesses(pid)) == 0 }) {
		t.Fatalf("the killed downloader's browser processes live on: %v", browserProcesses(pid))
	}
	if _, dirs := profileDirs(tmp); len(dirs) != 1 || dirs[0] != killed {
		t.Fatalf("after kill -9: %v, want the killed run's %s left (else this test proves nothing)", dirs, killed)
	}

	c = startChild(t, dataDir, tmp, args...)
	renderOnce(t, c, "second.test")
	_, dirs = profileDirs(tmp)
	if len(dirs) != 1 || dirs[0] == killed || !strings.HasPrefix(dirs[0], fmt.Sprint(c.cmd.Process.Pid)+"-") {
		t.Errorf("after the restart: %v, want only the new run's (the killed run's %s removed)", dirs, killed)
	}
	if code := c.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM\n%s", code, c.stderr.String())
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("TMPDIR after a clean stop: %v, want empty", entries)
	}
}

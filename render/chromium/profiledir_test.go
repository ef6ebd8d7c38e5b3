package chromium

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// profileChildEnv makes the test binary a child that holds one profile directory under
// the parent it names, prints its path and waits to be killed (TestMain runs it).
const profileChildEnv = "RENDER_PROFILEDIR_CHILD"

// profileDirChild is the child's whole life.
func profileDirChild(parent string) int {
	d, err := NewProfileDir(parent, time.Now())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(d.dir)
	io.Copy(io.Discard, os.Stdin) // until the parent kills us (or closes stdin)
	return 0
}

// startProfileChild starts a child process holding a profile directory under parent and
// returns it with the directory's path.
func startProfileChild(t *testing.T, parent string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), profileChildEnv+"="+parent)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("profile child: %v", err)
	}
	return cmd, strings.TrimSpace(line)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestProfileDirLiveKept: a directory whose owner lives, in another process or in this
// one, survives every sweep.
func TestProfileDirLiveKept(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "renderer")
	_, other := startProfileChild(t, parent)
	mine, err := NewProfileDir(parent, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Release()
	if !strings.HasPrefix(filepath.Base(mine.dir), fmt.Sprint(os.Getpid())+"-") {
		t.Errorf("directory %s is not named after our pid %d", mine.dir, os.Getpid())
	}
	if mine.path != filepath.Join(mine.dir, profileDataName) || !exists(mine.path) {
		t.Errorf("user data directory %s missing", mine.path)
	}
	if mine.swept != 0 {
		t.Errorf("swept %d directories, want 0: the other process's owner lives", mine.swept)
	}
	for range 3 {
		n, err := sweepProfileDirs(parent, time.Now())
		if err != nil || n != 0 {
			t.Fatalf("sweep removed %d (%v), want none", n, err)
		}
	}
	if !exists(other) || !exists(mine.path) {
		t.Errorf("a live directory was removed: other %v, mine %v", exists(other), exists(mine.path))
	}
}

// TestProfileDirDeadRemoved: the directory of a process killed with SIGKILL is removed at
// the next start; so is a locked-then-abandoned hidden one; names we do not know stay.
func TestProfileDirDeadRemoved(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "renderer")
	cmd, dead := startProfileChild(t, parent)
	// Something the browser wrote there.
	if err := os.WriteFile(filepath.Join(dead, profileDataName, "Local State"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// A hidden directory left between its lock and its rename two minutes ago, one being
	// made just now (its lock not yet taken), and a stranger.
	hidden := func(age time.Duration) string {
		dir, err := os.MkdirTemp(parent, profileNewPrefix)
		if err != nil {
			t.Fatal(err)
		}
		f, err := lockDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		f.Close() // not held
		at := time.Now().Add(-age)
		if err := os.Chtimes(dir, at, at); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	abandoned, fresh := hidden(2*newDirGrace), hidden(0)
	stranger := filepath.Join(parent, "notes")
	if err := os.Mkdir(stranger, 0o700); err != nil {
		t.Fatal(err)
	}

	d, err := NewProfileDir(parent, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d.swept != 2 || exists(dead) || exists(abandoned) {
		t.Errorf("swept %d; dead %s there: %v, abandoned there: %v; want both removed", d.swept, dead, exists(dead), exists(abandoned))
	}
	if !exists(stranger) || !exists(fresh) {
		t.Errorf("removed a directory of a name we do not make (%v) or one being made (%v)", !exists(stranger), !exists(fresh))
	}
	os.Remove(stranger)
	os.RemoveAll(fresh)
	if err := d.Release(); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(); err != nil {
		t.Errorf("second release: %v", err)
	}
	if exists(parent) {
		entries, _ := os.ReadDir(parent)
		t.Errorf("the parent is left after the last release: %v", entries)
	}
}

// TestProfileDirConcurrentPools: many pools launching and closing at once under one
// parent never remove each other's live directories, and leave nothing behind.
func TestProfileDirConcurrentPools(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "renderer")
	_, other := startProfileChild(t, parent) // a pool in another process, alive throughout
	const pools, launches = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, pools*launches)
	start := make(chan struct{})
	for p := range pools {
		wg.Go(func() {
			<-start
			for i := range launches {
				d, err := NewProfileDir(parent, time.Now())
				if err != nil {
					errs <- err
					return
				}
				file := filepath.Join(d.path, "Local State")
				if err := os.WriteFile(file, []byte(fmt.Sprint(p, i)), 0o600); err != nil {
					errs <- fmt.Errorf("pool %d: write into its own profile: %w", p, err)
				}
				// Others sweep meanwhile; our directory must still be whole.
				if _, err := sweepProfileDirs(parent, time.Now()); err != nil && !os.IsNotExist(err) {
					errs <- err
				}
				if b, err := os.ReadFile(file); err != nil || string(b) != fmt.Sprint(p, i) {
					errs <- fmt.Errorf("pool %d: its live profile was disturbed: %q %v", p, b, err)
				}
				if err := d.Release(); err != nil {
					errs <- err
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !exists(other) {
		t.Error("the other process's live directory was removed")
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 || filepath.Join(parent, entries[0].Name()) != other {
		t.Errorf("left under the parent: %v, want only the live other process's", entries)
	}
}

// TestProfileDirParentChecks: a parent that is not a private directory of ours is refused
// (in a shared TMPDIR another user could have made it first).
func TestProfileDirParentChecks(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	link := filepath.Join(base, "link")
	os.Symlink(t.TempDir(), link)
	for _, parent := range []string{open, file, link} {
		if d, err := NewProfileDir(parent, time.Now()); err == nil {
			d.Release()
			t.Errorf("NewProfileDir(%s) accepted it", parent)
		}
	}
	if got := defaultProfileParent(); got != filepath.Join(os.TempDir(), fmt.Sprintf("downloader-renderer-%d", os.Getuid())) {
		t.Errorf("default parent %s", got)
	}
}

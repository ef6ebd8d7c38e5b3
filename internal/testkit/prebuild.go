package testkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// Build is a `go build` of a command started in the background by TestMain, for the tests
// that run the built program as a process of its own: linking the service takes tens of
// seconds on a loaded machine, and a test that built it on first use paid that inside the
// package's one sequential lane; started at once, it overlaps the tests before.
type Build struct {
	path   string
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// StartBuild starts `go build -ldflags=-w -o out pkg` in directory dir (no DWARF: no test
// debugs the program, and it is a third of the link's CPU on a CI machine's two cores). The process (and os/exec's
// goroutines) starts before it returns, so that a test's goroutine snapshot taken later
// holds them; a build that cannot start is the error Path reports.
func StartBuild(dir, pkg, out string) *Build {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags=-w", "-o", out, pkg)
	cmd.Dir = dir
	// Stop ends the go command and the compilers and linker it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return start(out, cancel, cmd, "go build "+pkg, nil)
}

// start starts cmd (bound to the context cancel ends) and returns the Build of the program
// at path that it makes or waits for: done once cmd has ended and then check, if any, has
// run; cmd's failure, with its output, or check's is the error Path reports.
func start(path string, cancel context.CancelFunc, cmd *exec.Cmd, what string, check func() error) *Build {
	b := &Build{path: path, done: make(chan struct{}), cancel: cancel}
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		b.err = fmt.Errorf("%s: %w", what, err)
		close(b.done)
		return b
	}
	go func() {
		defer close(b.done)
		if err := cmd.Wait(); err != nil {
			b.err = fmt.Errorf("%s: %w\n%s", what, err, output.Bytes())
			return
		}
		if check != nil {
			b.err = check()
		}
	}()
	return b
}

// Wait waits for the build to end, however it ended.
func (b *Build) Wait() { <-b.done }

// Path waits for the build and returns the program's path; t fails if the build did.
func (b *Build) Path(t testing.TB) string {
	t.Helper()
	<-b.done
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Stop ends the build if it still runs (no test asked for the program) and waits for it,
// so that TestMain leaves no process or goroutine behind.
func (b *Build) Stop() {
	b.cancel()
	<-b.done
}

// NoBuild is a Build that was never started, for a test binary that needs no program (a
// child process running one test): Stop returns at once, and Path fails the test.
func NoBuild() *Build {
	b := &Build{done: make(chan struct{}), cancel: func() {}, err: errors.New("no build was started in this process")}
	close(b.done)
	return b
}

// ServiceBinaryEnv names the environment variable through which scripts/test.sh hands the
// packages whose tests run the service (faults, cmd/downloader) the program it builds once
// for the whole suite: each package building its own, at the same moment and beside go vet,
// compiled the module without -race three times on CI's two cores (docs/reliability.md §10).
// test.sh holds an exclusive flock(2) on the program's path + ".lock" while it builds, and
// writes the build's output to its path + ".log".
const ServiceBinaryEnv = "DOWNLOADER_TEST_BINARY"

// StartServiceBuild returns the service's program (cmd/downloader) for a package's tests:
// the one named by ServiceBinaryEnv when set, waited for by a shared lock on its ".lock"
// (flock(1), a process of its own, so that Stop can end the wait), else a build of its own
// into out, started now (StartBuild; dir is any directory of the module).
func StartServiceBuild(dir, out string) *Build {
	prebuilt := os.Getenv(ServiceBinaryEnv)
	if prebuilt == "" {
		return StartBuild(dir, "downloader/cmd/downloader", out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "flock", "--shared", prebuilt+".lock", "true")
	return start(prebuilt, cancel, cmd, "waiting for "+prebuilt+" (flock)", func() error {
		if _, err := os.Stat(prebuilt); err != nil {
			log, _ := os.ReadFile(prebuilt + ".log")
			return fmt.Errorf("the suite's build of the service failed: %w\n%s", err, log)
		}
		return nil
	})
}

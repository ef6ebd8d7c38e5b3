package chromium

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/sys/unix"

	"downloader/internal/procstat"
)

// KillTreeOnCancel makes the browser's cancellation kill the whole process tree at once,
// not only the main process. chromedp waits for the browser's output pipe to close before
// it reports the browser gone, and Chromium's helpers (zygote, renderers, GPU, network
// service) inherit that pipe: one that outlives the main process kept Close waiting
// forever. The helpers are collected before the main process dies, while they are still
// its descendants.
func KillTreeOnCancel() chromedp.ExecAllocatorOption {
	return chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL // as chromedp's default: die with us
		cmd.Cancel = func() error {
			if cmd.Process == nil {
				return nil
			}
			return killTree(cmd.Process.Pid)
		}
	})
}

// killTree kills pid and every process below it, and returns once each has exited (or
// exitBound has passed). A tree killed from one listing of /proc kept a helper forked
// between the listing and the kills: orphaned, it outlived the service (seen under load by
// faults' TestSIGTERMDuringLoad). So the tree is first stopped, listed again and again
// until a listing finds no process not yet stopped (a stopped process cannot fork, and one
// inside fork has finished it once it shows as stopped), and only then killed. Each
// process is held by a pidfd from the moment it is stopped: the kill cannot reach a
// recycled pid, and its exit is waited for without polling.
func killTree(pid int) error {
	var held []int // pidfds, in the order the processes were stopped
	defer func() {
		for _, fd := range held {
			unix.Close(fd)
		}
	}()
	seen := map[int]bool{}
	var first error
	note := func(err error) {
		if err != nil && err != unix.ESRCH && first == nil {
			first = err
		}
	}
	for {
		var stopped []int
		for _, p := range append([]int{pid}, descendants(pid)...) {
			if seen[p] {
				continue
			}
			seen[p] = true
			fd, err := unix.PidfdOpen(p, 0)
			if err != nil {
				note(err) // ESRCH: gone already
				continue
			}
			held = append(held, fd)
			note(unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0))
			stopped = append(stopped, p)
		}
		if len(stopped) == 0 {
			break
		}
		waitStopped(stopped, time.Now().Add(stopBound))
	}
	for _, fd := range held {
		note(unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0))
	}
	waitExited(held, exitBound)
	return first
}

// stopBound bounds the wait for one round of the tree to show as stopped, and exitBound
// the wait for the killed tree to exit: a process in uninterruptible sleep (disk) takes
// its signal late, and the close must not wait on it for ever.
const (
	stopBound = 2 * time.Second
	exitBound = 10 * time.Second
)

// waitStopped waits until each of pids shows in /proc as stopped, a zombie or gone, or
// until deadline. A SIGSTOP takes effect when the process next leaves the kernel, within
// microseconds unless it is in uninterruptible sleep: a short yield between checks.
func waitStopped(pids []int, deadline time.Time) {
	for _, p := range pids {
		for {
			switch procState(p) {
			case "", "T", "t", "Z", "X":
			default:
				if time.Now().Before(deadline) {
					time.Sleep(100 * time.Microsecond)
					continue
				}
			}
			break
		}
	}
}

// waitExited waits until every pidfd in fds reports its process exited, or bound passes.
func waitExited(fds []int, bound time.Duration) {
	deadline := time.Now().Add(bound)
	pending := make([]unix.PollFd, 0, len(fds))
	for _, fd := range fds {
		pending = append(pending, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	for len(pending) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		n, err := unix.Poll(pending, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		rest := pending[:0]
		for _, p := range pending {
			if p.Revents == 0 {
				rest = append(rest, p)
			}
		}
		pending = rest
	}
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		self, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fields := procstat.Fields(e.Name())
		if len(fields) < 2 {
			continue
		}
		ppid, err := strconv.Atoi(fields[1])
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], self)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// procState returns the state letter of pid from /proc ("" if gone).
func procState(pid int) string {
	if f := procstat.Fields(strconv.Itoa(pid)); len(f) > 0 {
		return f[0]
	}
	return ""
}

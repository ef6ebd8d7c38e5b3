package chromium

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/chromedp/chromedp"

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

// killTree sends SIGKILL to pid and every descendant of it.
func killTree(pid int) error {
	pids := append(descendants(pid), pid)
	var first error
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && err != syscall.ESRCH && first == nil {
			first = err
		}
	}
	return first
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

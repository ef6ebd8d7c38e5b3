package render

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/chromedp/chromedp"
)

// killTreeOnCancel makes the browser's cancellation kill the whole process tree at once,
// not only the main process. chromedp waits for the browser's output pipe to close before
// it reports the browser gone, and Chromium's helpers (zygote, renderers, GPU, network
// service) inherit that pipe: one that outlives the main process kept Close waiting
// forever. The helpers are collected before the main process dies, while they are still
// its descendants.
func killTreeOnCancel() chromedp.ExecAllocatorOption {
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
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		s := string(b)
		end := strings.LastIndexByte(s, ')')
		if end < 0 {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 {
			continue
		}
		self, err1 := strconv.Atoi(strings.Fields(s)[0])
		ppid, err2 := strconv.Atoi(fields[1])
		if err1 != nil || err2 != nil {
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
func procState(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 || end+2 >= len(s) {
		return "", nil
	}
	return string(s[end+2]), nil
}

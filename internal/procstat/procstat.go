// Package procstat reads a process's /proc/<pid>/stat on Linux: the one parser of that
// line for the renderer's process-tree kill, the soak's resource sampling and the tests
// that count browser processes.
package procstat

import (
	"os"
	"strconv"
	"strings"
)

// Fields returns the fields of /proc/<pid>/stat after the command name: state, ppid,
// pgrp, session, ... (field 3 onwards of proc(5), so utime is index 11). pid may be
// "self". It returns nil when the process is gone or the line cannot be read. The command
// name may hold spaces and parentheses: the fields start after its last ')'.
func Fields(pid string) []string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return nil
	}
	return strings.Fields(s[i+2:])
}

// HostCPU returns the host's CPU time from the first line of /proc/stat, in clock ticks
// summed over every CPU: busy (user, nice, system, irq, softirq, steal) and total (busy
// plus idle and iowait). Guest time is already inside user and nice. The ratio of two
// readings' differences is how busy the host was between them. ok is false when the line
// cannot be read.
func HostCPU() (busy, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	return parseHostCPU(string(b))
}

func parseHostCPU(s string) (busy, total uint64, ok bool) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice]
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total, true
}

// Package procstat reads a process's /proc/<pid>/stat on Linux: the one parser of that
// line for the renderer's process-tree kill, the soak's resource sampling and the tests
// that count browser processes.
package procstat

import (
	"os"
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

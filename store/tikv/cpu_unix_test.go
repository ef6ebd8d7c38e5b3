//go:build unix

package tikv

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) the process has used. On a shared
// machine it says what an operation costs where wall time would also count the time other
// processes held the CPU.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:build !unix

package limiter

import "time"

// processCPU is not measured on this platform; the cpu-ns/op metric reads 0.
func processCPU() time.Duration { return 0 }

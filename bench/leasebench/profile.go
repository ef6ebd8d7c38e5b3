package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"syscall"
	"time"
)

// profiles are the profile files asked for on the command line; each covers the whole run
// (use -only to profile one part).
type profiles struct {
	cpu, block, mutex, mem, trace string
}

// start begins the CPU profile and turns on block and mutex sampling; the returned stop
// writes every profile asked for.
func (p profiles) start() (stop func() error, err error) {
	var cpuFile *os.File
	if p.cpu != "" {
		if cpuFile, err = os.Create(p.cpu); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(cpuFile); err != nil {
			_ = cpuFile.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	var traceFile *os.File
	if p.trace != "" {
		if traceFile, err = os.Create(p.trace); err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		if err := trace.Start(traceFile); err != nil {
			_ = traceFile.Close()
			return nil, fmt.Errorf("trace: %w", err)
		}
	}
	if p.block != "" {
		runtime.SetBlockProfileRate(1)
	}
	if p.mutex != "" {
		runtime.SetMutexProfileFraction(1)
	}
	if p.mem != "" {
		runtime.MemProfileRate = 4096
	}
	return func() error {
		var errs []error
		if cpuFile != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpuFile.Close())
		}
		if traceFile != nil {
			trace.Stop()
			errs = append(errs, traceFile.Close())
		}
		errs = append(errs, write(p.block, "block"), write(p.mutex, "mutex"), write(p.mem, "allocs"))
		return errors.Join(errs...)
	}, nil
}

// write writes the named runtime profile to path, if path is set.
func write(path, name string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("%s profile: %w", name, err)
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s profile: %w", name, err)
	}
	return f.Close()
}

// processCPU returns the CPU time (user + system) the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPerPage is r's process CPU time per page, in milliseconds.
func cpuPerPage(r result) float64 {
	if r.pageCount == 0 {
		return 0
	}
	return float64(r.cpu) / float64(r.pageCount) / float64(time.Millisecond)
}

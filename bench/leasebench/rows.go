package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// row is one line of a table: a crawler and how to run its workload once.
type row struct {
	name string
	f    func() (result, error)
}

// measureRows runs every row runs times, alternating: each round runs every row once, in
// order (downloader, then its peer), so that a change of the machine's load during the
// benchmark falls on every row alike instead of on whichever row ran last. It returns each
// row's runs. A run that failed, or that the origin saw no request of, is an error: a table
// without figures is no result.
func measureRows(rows []row, runs int) ([][]result, error) {
	if runs < 1 {
		return nil, fmt.Errorf("run count %d: at least 1", runs)
	}
	out := make([][]result, len(rows))
	for round := range runs {
		for i, r := range rows {
			res, err := r.f()
			if err != nil {
				return nil, fmt.Errorf("%s (run %d of %d): %w", r.name, round+1, runs, err)
			}
			if res.pageCount == 0 {
				return nil, fmt.Errorf("%s (run %d of %d): the origin saw no request", r.name, round+1, runs)
			}
			res.load = loadAverage()
			out[i] = append(out[i], res)
		}
	}
	return out, nil
}

// medianBy returns the run of rs whose key is the median (the upper one of an even count).
func medianBy(rs []result, key func(result) float64) result {
	s := append([]result(nil), rs...)
	sort.Slice(s, func(i, j int) bool { return key(s[i]) < key(s[j]) })
	return s[len(s)/2]
}

// byTotal orders runs by their makespan (or elapsed time: the same page count).
func byTotal(r result) float64 { return float64(r.total) }

// byCPU orders runs by their CPU per page.
func byCPU(r result) float64 { return cpuPerPage(r) }

// loadRange is the 1-minute load averages at the ends of rs's runs, "min–max", for the
// column beside the figures: a row measured beside other work is not comparable.
func loadRange(rs []result) string {
	lo, hi := rs[0].load, rs[0].load
	for _, r := range rs {
		lo, hi = min(lo, r.load), max(hi, r.load)
	}
	if lo == hi {
		return fmt.Sprintf("%.2f", lo)
	}
	return fmt.Sprintf("%.2f–%.2f", lo, hi)
}

// loadAverage is the machine's 1-minute load average (/proc/loadavg); -1 when unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// machineLine describes the machine and its load now, printed above every table.
func machineLine() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("Machine at %s: load average %s.", time.Now().UTC().Format("15:04:05 UTC"),
		strings.Join(strings.Fields(string(b))[:min(3, len(strings.Fields(string(b))))], " "))
}

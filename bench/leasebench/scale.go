package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"downloader"
	"downloader/localqueue"
	"downloader/store/embedded"
)

// runCPUTable prints the CPU-seconds the whole process spends per 1,000 plain pages (the
// throughput workload, interval 0): entry A with and without stored pages, Colly, and
// Colly plus a visible-text extraction of each page (htmltext.Text, the work entry A does
// for every page and Colly does not). getrusage of the process, origin included: the
// origin's share is the same in every row. With part "a" the Colly rows are left out, so
// that a profile of the run holds entry A alone (the ratio column is then left empty); with
// part "c" entry A's rows are, so that a profile holds Colly's alone, to set beside it.
func runCPUTable(hosts, pages int, latency time.Duration, concurrent, heldPerSlot int, part string, runs int) error {
	out := os.Stdout
	fmt.Fprintf(out, "\n## CPU per 1,000 plain pages: %d hosts × %d pages, interval 0, origin latency %v, %d in flight\n\n", hosts, pages, latency, concurrent)
	fmt.Fprintf(out, "Median of %d runs, the rows alternating. %s\n\n", runs, machineLine())
	fmt.Fprintln(out, "| crawler | pages | CPU-seconds per 1,000 pages | ÷ Colly + text extraction | load (1 min) |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	w := workload{hosts: hosts, pages: pages, latency: latency}
	ws := w
	ws.shouldStore = true
	// Entry A's rows and Colly's alternate; the last row is the floor of the ratio column.
	a := []row{
		{"downloader entry A, should_store=false", func() (result, error) { return runEntryA(w, concurrent, heldPerSlot) }},
		{"downloader entry A, should_store=true", func() (result, error) { return runEntryA(ws, concurrent, heldPerSlot) }},
	}
	c := []row{
		{fmt.Sprintf("Colly, Parallelism %d", concurrent), func() (result, error) { return runColly(w, 0, concurrent, "") }},
		{fmt.Sprintf("Colly, Parallelism %d, + visible-text extraction", concurrent), func() (result, error) {
			return runCollyText(w, concurrent)
		}},
	}
	onlyEntryA := part == "a"
	var rows []row
	switch part {
	case "a":
		rows = a
	case "c":
		rows = c
	default:
		rows = []row{a[0], c[0], a[1], c[1]}
	}
	all, err := measureRows(rows, runs)
	if err != nil {
		return err
	}
	rs := make([]result, len(rows))
	for i := range rows {
		rs[i] = medianBy(all[i], byCPU)
	}
	floor := cpuPerPage(rs[len(rs)-1])
	for i, r := range rows {
		ratio := ""
		if !onlyEntryA {
			ratio = fmt.Sprintf("%.2f", cpuPerPage(rs[i])/floor)
		}
		fmt.Fprintf(out, "| %s | %d | %.3f | %s | %s |\n", r.name, rs[i].pageCount, cpuPerPage(rs[i]), ratio, loadRange(all[i]))
	}
	return nil
}

// runRSSTable queues taskCount tasks over hostCount hosts in a fresh local queue and
// prints what that costs in memory: the process's resident set and the Go heap in use
// (after a GC), beyond what the open store and empty queue took, right after the submits
// and after a restart (close, open, localqueue.Open rebuilding its index from the store). The
// store's block cache (64 MiB) fills as it reads; the heap column excludes it when Pebble
// allocates it outside the Go heap (cgo builds) and includes it otherwise.
func runRSSTable(taskCount, hostCount int) error {
	out := os.Stdout
	fmt.Fprintf(out, "\n## Memory: %d tasks queued over %d hosts (local queue)\n\n", taskCount, hostCount)
	fmt.Fprintln(out, "| moment | RSS beyond the empty queue | per queued task | Go heap in use beyond it | per queued task |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	dir, err := os.MkdirTemp("", "leasebench-rss-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "store")
	ctx := context.Background()
	st, err := embedded.Open(path, nil)
	if err != nil {
		return err
	}
	q, err := localqueue.Open(ctx, st, localqueue.Config{})
	if err != nil {
		_ = st.Close()
		return err
	}
	rss0, heap0 := memNow()
	iv := int64(1000)
	batch := make([]downloader.Task, 0, localqueue.MaxSubmitCount)
	for i := range taskCount {
		batch = append(batch, downloader.Task{URL: fmt.Sprintf("http://h%05d.bench.test/p%d", i%hostCount, i/hostCount), MinIntervalMs: &iv})
		if len(batch) == cap(batch) || i == taskCount-1 {
			if _, err := q.Submit(ctx, batch); err != nil {
				_ = st.Close()
				return err
			}
			batch = batch[:0]
		}
	}
	if c := q.Counts(); c.PendingCount != taskCount {
		_ = st.Close()
		return fmt.Errorf("%d pending after submitting %d", c.PendingCount, taskCount)
	}
	rss1, heap1 := memNow()
	row := func(name string, rss, heap int64) {
		fmt.Fprintf(out, "| %s | %.1f MiB | %d B | %.1f MiB | %d B |\n", name, float64(rss-rss0)/(1<<20), (rss-rss0)/int64(taskCount),
			float64(heap-heap0)/(1<<20), (heap-heap0)/int64(taskCount))
	}
	row("after the submits", rss1, heap1)
	if err := st.Close(); err != nil {
		return err
	}
	runtime.KeepAlive(q)
	st, err = embedded.Open(path, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	q, err = localqueue.Open(ctx, st, localqueue.Config{})
	if err != nil {
		return err
	}
	if c := q.Counts(); c.PendingCount != taskCount {
		return fmt.Errorf("%d pending after the restart", c.PendingCount)
	}
	rss2, heap2 := memNow()
	row("after a restart (index rebuilt)", rss2, heap2)
	runtime.KeepAlive(q)
	return nil
}

// memNow returns the process's resident set (VmRSS) and the Go heap in use, after a GC.
func memNow() (rss, heap int64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range bytes.Split(b, []byte("\n")) {
			if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "VmRSS:" {
				kb, _ := strconv.ParseInt(string(f[1]), 10, 64)
				rss = kb << 10
			}
		}
	}
	return rss, int64(ms.HeapInuse)
}

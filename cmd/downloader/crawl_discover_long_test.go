package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"downloader/origintest"
)

// TestCrawlDiscoversALargeSite is the measure of discovery at size, run by hand (it takes
// minutes; docs/benchmarks.md has its figures):
//
//	DOWNLOADER_DISCOVER_LONG=1 go test -v -run '^TestCrawlDiscoversALargeSite$' -timeout 30m ./cmd/downloader
//
// The built program crawls, from one seed, a synthetic site of 50 hosts under one
// registrable domain with 200 pages each (10,000 pages, plus each host's root): every
// page is found once, nothing else is asked for but robots.txt and /sitemap.xml, and no
// two arrivals at a host are closer than its interval at the origin.
func TestCrawlDiscoversALargeSite(t *testing.T) {
	if os.Getenv("DOWNLOADER_DISCOVER_LONG") == "" {
		t.Skip("long: set DOWNLOADER_DISCOVER_LONG=1 (docs/benchmarks.md)")
	}
	const (
		hostCount    = 50
		pagesPerHost = 200
		fanout       = 10
		interval     = 20 * time.Millisecond
	)
	bin := buildBinary(t)
	// Host hN's root links to every host's root and to its pages 1..fanout; page i links
	// to pages fanout*i+1 .. fanout*i+fanout of its host (a tree), back to the root, and to
	// page i of the next host (a link found again).
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		var hn int
		if _, err := fmt.Sscanf(host, "h%d.big.test", &hn); err != nil {
			http.NotFound(w, r)
			return
		}
		var i int
		switch {
		case r.URL.Path == "/":
			i = 0
		case strings.HasPrefix(r.URL.Path, "/p/"):
			n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/p/"))
			if err != nil || n < 1 || n > pagesPerHost {
				http.NotFound(w, r)
				return
			}
			i = n
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><html><head><title>%s %d</title></head><body>", host, i)
		if i == 0 {
			for h := range hostCount {
				fmt.Fprintf(w, `<a href="http://h%d.big.test/">h%d</a>`, h, h)
			}
		}
		for c := fanout*i + 1; c <= fanout*i+fanout && c <= pagesPerHost; c++ {
			fmt.Fprintf(w, `<a href="/p/%d">%d</a>`, c, c)
		}
		if i > 0 {
			fmt.Fprintf(w, `<a href="/">root</a><a href="http://h%d.big.test/p/%d">next</a>`, (hn+1)%hostCount, i)
		}
		fmt.Fprint(w, "</body></html>")
	}))
	defer origin.Close()
	dir := t.TempDir()
	seed := writeFile(t, "http://h0.big.test/")
	start := time.Now()
	cmd := exec.CommandContext(context.Background(), bin, append(crawlArgs(filepath.Join(dir, "data"), origin,
		"--default-min-interval-ms", fmt.Sprint(interval.Milliseconds()), "--max-depth", "10", "--scope", "domain"), seed)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("crawl: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	elapsed := time.Since(start)
	got := map[string]int{}
	for _, a := range origin.Arrivals() {
		got[a.Host+a.Path]++
	}
	missing, twice := 0, 0
	for h := range hostCount {
		for i := 0; i <= pagesPerHost; i++ {
			k := fmt.Sprintf("h%d.big.test/p/%d", h, i)
			if i == 0 {
				k = fmt.Sprintf("h%d.big.test/", h)
			}
			switch got[k] {
			case 0:
				missing++
			case 1:
			default:
				twice++
			}
			delete(got, k)
		}
		delete(got, fmt.Sprintf("h%d.big.test/robots.txt", h))
		delete(got, fmt.Sprintf("h%d.big.test/sitemap.xml", h))
	}
	if missing > 0 || twice > 0 || len(got) > 0 {
		t.Errorf("%d pages missing, %d asked for twice, %d other requests", missing, twice, len(got))
	}
	v := origin.Violations(func(string) (time.Duration, bool) { return interval, true }, 2*time.Millisecond)
	if len(v) > 0 {
		t.Errorf("%d arrivals closer than the interval, first %v", len(v), v[0])
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("%d pages on %d hosts in %v (%.0f pages/s), %d violations, %d unstamped arrivals; load average %s\n%s",
		hostCount*(pagesPerHost+1), hostCount, elapsed.Round(time.Second), float64(hostCount*(pagesPerHost+1))/elapsed.Seconds(),
		len(v), origin.UnstampedCount(), strings.TrimSpace(string(load)), stdout.String())
}

package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"downloader/origintest"
)

// crawlDelayAllowance: the origin stamps an arrival at the kernel's receive time of its
// first byte; the limiter spaces the moments requests go on the wire. Far below the
// Crawl-delay used here, so that requests sent at the task's own interval (0) fail.
const crawlDelayAllowance = 100 * time.Millisecond

// robotsOrigin serves robots.txt on polite.test (a Disallow and a Crawl-delay for every
// agent, and a stricter group for ours) and none (404) elsewhere.
func robotsOrigin() *origintest.Origin {
	return origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if r.URL.Path == "/robots.txt" {
			if host != "polite.test" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprint(w, "User-agent: *\nDisallow: /\n\nUser-agent: downloader\nDisallow: /private\nCrawl-delay: 0.4\n")
			return
		}
		origintest.Page(w, r)
	}))
}

// TestCrawlRobots: against origins with and without robots.txt, a disallowed path is never
// requested and is counted as skipped, the Crawl-delay spaces the requests at the origin
// (robots.txt itself included: it is admitted by the limiter like any request), --output
// has one valid JSON line per URL and --warc holds the fetched pages. With robots.txt
// turned off, every path is fetched and no robots.txt is asked for.
func TestCrawlRobots(t *testing.T) {
	origin := robotsOrigin()
	defer origin.Close()
	urls := []string{"http://polite.test/a", "http://polite.test/b", "http://polite.test/c",
		"http://polite.test/private/x", "http://plain.test/1", "http://plain.test/2"}
	file := writeFile(t, urls...)
	dir := t.TempDir()
	outPath, warcPath := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "pages.warc.gz")

	var stdout, stderr syncBuffer
	args := append(crawlArgs(filepath.Join(dir, "data"), origin, "--default-min-interval-ms", "0",
		"--output", outPath, "--warc", warcPath), file)
	if err := run(context.Background(), args, noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("crawl: %v\n%s", err, stderr.String())
	}
	pages := pageArrivals(origin)
	if pages["polite.test/private/x"] != 0 {
		t.Errorf("a disallowed path was requested")
	}
	for _, u := range []string{"polite.test/a", "polite.test/b", "polite.test/c", "plain.test/1", "plain.test/2"} {
		if pages[u] != 1 {
			t.Errorf("%s requested %d times, want once", u, pages[u])
		}
	}
	if r := robotsArrivals(origin); r["polite.test"] != 1 || r["plain.test"] != 1 {
		t.Errorf("robots.txt requests %v, want one per site", r)
	}
	// Crawl-delay 0.4 s against a task interval of 0: every request to polite.test, the
	// robots.txt one first, at least 400 ms after the one before.
	var at []time.Time
	for _, a := range origin.Arrivals() {
		if a.Host == "polite.test" {
			at = append(at, a.At)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	if len(at) != 4 {
		t.Fatalf("polite.test got %d requests, want 4", len(at))
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 400*time.Millisecond-crawlDelayAllowance {
			t.Errorf("polite.test requests %d and %d only %v apart, want the Crawl-delay 400ms", i, i+1, gap)
		}
	}
	if sum := squash(stdout.String()); !strings.Contains(sum, "skipped by robots.txt 1") || !strings.Contains(sum, "succeeded 5") {
		t.Errorf("summary:\n%s", stdout.String())
	}

	// One JSON line per URL.
	lines := readLines(t, outPath)
	if len(lines) != len(urls) {
		t.Fatalf("%d lines in --output, want %d", len(lines), len(urls))
	}
	byURL := map[string]map[string]any{}
	for _, l := range lines {
		byURL[l["url"].(string)] = l
	}
	for _, u := range urls {
		l := byURL[u]
		if l == nil {
			t.Errorf("no line for %s", u)
			continue
		}
		wantState, wantSkip := "done", any(nil)
		if strings.Contains(u, "private") {
			wantState, wantSkip = "skipped", "robots_disallowed"
		}
		if l["state"] != wantState || l["skip_reason"] != wantSkip || l["task_id"] == "" {
			t.Errorf("%s: %v", u, l)
		}
		if wantState == "done" && (l["attempt_count"] != float64(1) || l["page_key"] == nil || l["final_url"] != u || l["http_status"] != float64(200)) {
			t.Errorf("%s: %v", u, l)
		}
	}
	if n := countWARCRecords(t, warcPath, "response"); n != 5 {
		t.Errorf("%d response records in the WARC file, want 5", n)
	}

	// The same data dir exported again gives the same lines.
	exported := filepath.Join(dir, "again.jsonl")
	stderr = syncBuffer{}
	if err := run(context.Background(), []string{"export", "--data-dir", filepath.Join(dir, "data"), "--output", exported}, noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr.String())
	}
	a, _ := os.ReadFile(outPath)
	b, _ := os.ReadFile(exported)
	if !bytes.Equal(a, b) || !strings.Contains(stderr.String(), "6 JSON lines") {
		t.Errorf("export differs from the crawl's --output:\n%s\n---\n%s\n%s", a, b, stderr.String())
	}

	// robots.txt off: everything fetched, no robots.txt asked for.
	origin2 := robotsOrigin()
	defer origin2.Close()
	stdout, stderr = syncBuffer{}, syncBuffer{}
	args = append(crawlArgs(filepath.Join(dir, "data2"), origin2, "--default-min-interval-ms", "0", "--should-obey-robots-txt=false"), file)
	if err := run(context.Background(), args, noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("crawl without robots: %v\n%s", err, stderr.String())
	}
	if p := pageArrivals(origin2); p["polite.test/private/x"] != 1 || len(p) != 6 {
		t.Errorf("without robots.txt fetched %v", p)
	}
	if r := robotsArrivals(origin2); len(r) != 0 {
		t.Errorf("robots.txt asked for although turned off: %v", r)
	}
}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d of %s is not JSON: %v: %s", len(out)+1, path, err, sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// countWARCRecords counts the records of a type in a .warc.gz (package export's test reads
// and checks the records themselves).
func countWARCRecords(t *testing.T, path, typ string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "WARC-Type: "+typ+"\r\n")
}

// TestCrawlHelpShowsCrawlFlags: crawl --help lists the crawl's flags, not the service's.
func TestCrawlHelpShowsCrawlFlags(t *testing.T) {
	var stdout, stderr syncBuffer
	if err := run(context.Background(), []string{"crawl", "--help"}, noEnv, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	help := stderr.String()
	for _, want := range []string{"-output", "-warc", "-should-obey-robots-txt", "-max-attempt-count", "-data-dir", "-default-min-interval-ms"} {
		if !strings.Contains(help, want) {
			t.Errorf("crawl --help lacks %s", want)
		}
	}
	// A back-quoted word in a usage is the flag's argument name: it must be one.
	if !strings.Contains(help, "-render-guard-proxy-listen ADDR") || strings.Contains(help, "http:// this") {
		t.Errorf("crawl --help garbles --render-guard-proxy-listen:\n%s", help)
	}
	for _, not := range []string{"-scheduler-url", "-worker-id", "-api-token", "-egress-canary", "-tikv"} {
		if strings.Contains(help, not) {
			t.Errorf("crawl --help shows %s, which is not a crawl's", not)
		}
	}
}

// TestCrawlDataDirInUse: a second crawl on a data dir in use says so and names the lock.
func TestCrawlDataDirInUse(t *testing.T) {
	origin := origintest.New(nil)
	defer origin.Close()
	dataDir := t.TempDir()
	release := make(chan struct{})
	slow := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/robots.txt" {
			<-release
		}
		origintest.Page(w, r)
	}))
	defer slow.Close()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	var out1, err1 syncBuffer
	go func() {
		first <- run(ctx, append(crawlArgs(dataDir, slow, "--shutdown-grace-seconds", "0"), writeFile(t, "http://s.test/")), noEnv, &out1, &err1)
	}()
	// Wait until the first crawl holds the data dir (it prints the console line).
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(err1.String(), "console on") {
		if time.Now().After(deadline) {
			t.Fatalf("first crawl did not start:\n%s", err1.String())
		}
		select {
		case err := <-first:
			t.Fatalf("first crawl ended: %v\n%s", err, err1.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	var stdout, stderr syncBuffer
	err := run(context.Background(), append(crawlArgs(dataDir, origin), writeFile(t, "http://x.test/")), noEnv, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), filepath.Join(dataDir, "store", "LOCK")) ||
		!strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("second crawl on the same data dir: %v", err)
	}
	cancel()
	<-first
}

// TestETAEstimator: the ETA follows the recent rate, smoothed: a burst does not make it
// jump to the burst's rate, and a lasting slow-down moves it.
func TestETAEstimator(t *testing.T) {
	var e etaEstimator
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, ok := e.eta(10); ok {
		t.Fatal("an ETA before any rate")
	}
	e.observe(t0, 0)
	for i := 1; i <= 60; i++ { // 10 tasks/s for a minute
		e.observe(t0.Add(time.Duration(i)*time.Second), 10*i)
	}
	if eta, _ := e.eta(100); eta < 9*time.Second || eta > 11*time.Second {
		t.Fatalf("steady 10/s: eta for 100 left %v, want ~10s", eta)
	}
	// One burst second of 1000 tasks: the ETA moves, but far less than to the burst's rate.
	e.observe(t0.Add(61*time.Second), 600+1000)
	if eta, _ := e.eta(1000); eta < 10*time.Second {
		t.Fatalf("after one burst: eta for 1000 left %v: it jumped to the burst rate", eta)
	}
	// Then 1 task/s for two minutes: the ETA follows down to the slow rate.
	done := 1600
	for i := 62; i <= 181; i++ {
		done++
		e.observe(t0.Add(time.Duration(i)*time.Second), done)
	}
	if eta, _ := e.eta(10); eta < 8*time.Second || eta > 14*time.Second {
		t.Fatalf("after a lasting 1/s: eta for 10 left %v, want ~10s", eta)
	}
}

// TestCrawlRetries: through the whole program, a 503 is retried after its backoff and then
// succeeds (two attempts), a 404 is final after one, and --output says so.
func TestCrawlRetries(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path]++
		n := seen[r.URL.Path]
		mu.Unlock()
		switch {
		case r.URL.Path == "/robots.txt" || r.URL.Path == "/gone":
			http.NotFound(w, r)
		case r.URL.Path == "/flaky" && n == 1:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			origintest.Page(w, r)
		}
	}))
	defer origin.Close()
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	var stdout, stderr syncBuffer
	args := append(crawlArgs(filepath.Join(dir, "data"), origin, "--default-min-interval-ms", "0", "--max-attempt-count", "2", "--output", out),
		writeFile(t, "http://f.test/flaky", "http://f.test/gone"))
	if err := run(context.Background(), args, noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("crawl: %v\n%s", err, stderr.String())
	}
	byURL := map[string]map[string]any{}
	for _, l := range readLines(t, out) {
		byURL[l["url"].(string)] = l
	}
	if l := byURL["http://f.test/flaky"]; l["state"] != "done" || l["attempt_count"] != float64(2) {
		t.Errorf("flaky: %v", l)
	}
	if l := byURL["http://f.test/gone"]; l["state"] != "failed" || l["attempt_count"] != float64(1) || l["fail_reason"] != "http_status_error" {
		t.Errorf("gone: %v", l)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["/flaky"] != 2 || seen["/gone"] != 1 {
		t.Errorf("requests %v, want /flaky twice and /gone once", seen)
	}
	if !strings.Contains(squash(stdout.String()), "retries 1") {
		t.Errorf("summary:\n%s", stdout.String())
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"downloader/origintest"
)

// crawlArgs are the flags every crawl test passes: a temp data dir, every host sent to the
// origin, and a renderer endpoint that refuses (no browser is launched; a render fails with
// renderer_unavailable).
func crawlArgs(dataDir string, origin *origintest.Origin, extra ...string) []string {
	return append([]string{"crawl", "--data-dir", dataDir, "--connect-to", origin.ConnectTo(),
		"--renderer-endpoint", "ws://127.0.0.1:1/devtools/browser", "--shutdown-grace-seconds", "5"}, extra...)
}

func writeFile(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "urls.txt")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func noEnv(string) string { return "" }

// squash collapses runs of white space, so that table layout does not matter.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestCrawl crawls a list end to end through the real program: every URL fetched once, the
// summary printed, exit 0; run again it queues nothing and fetches nothing.
func TestCrawl(t *testing.T) {
	origin := origintest.New(nil)
	defer origin.Close()
	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprintf("http://c%d.test/page%d", i%4, i))
	}
	lines = append(lines, "", "# a comment", `{"url":"http://json.test/x","min_interval_ms":0,"should_store":false}`,
		"http://C0.TEST/page0#dup")
	file := writeFile(t, lines...)
	dataDir := t.TempDir()

	var stdout, stderr syncBuffer
	if err := run(context.Background(), append(crawlArgs(dataDir, origin, "--default-min-interval-ms", "40"), file), noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("crawl: %v\nstderr:\n%s", err, stderr.String())
	}
	out := squash(stdout.String())
	for _, want := range []string{"crawl summary", "tasks 21", "succeeded 21", "pages stored 20", "politeness:", "domains with a gap below their interval: 0 of 5"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr.String(), "21 tasks (21 new, 0 queued before; 1 duplicate lines), 0 invalid lines") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "progress:") && !strings.Contains(stderr.String(), "0 invalid") {
		t.Errorf("no progress shown:\n%s", stderr.String())
	}
	t.Logf("origin min gaps: %v", origin.MinGaps())
	perURL := pageArrivals(origin)
	for host, n := range robotsArrivals(origin) {
		if n != 1 {
			t.Errorf("%s: robots.txt fetched %d times, want once", host, n)
		}
	}
	if len(perURL) != 21 {
		t.Errorf("%d URLs fetched, want 21: %v", len(perURL), perURL)
	}
	for u, n := range perURL {
		if n != 1 {
			t.Errorf("%s fetched %d times", u, n)
		}
	}

	// Again: everything is done already.
	stdout = syncBuffer{}
	stderr = syncBuffer{}
	if err := run(context.Background(), append(crawlArgs(dataDir, origin), file), noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("second crawl: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "21 tasks (0 new, 21 queued before; 1 duplicate lines)") {
		t.Errorf("second run stderr:\n%s", stderr.String())
	}
	if n := len(pageArrivals(origin)); n != 21 {
		t.Errorf("second run fetched again: %d pages", n)
	}
}

// TestCrawlResumesAfterInterrupt: Ctrl-C stops the crawl politely (exit 130); the same
// command then finishes it, fetching nothing twice.
func TestCrawlResumesAfterInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen atomic.Int64
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1) == 8 {
			cancel() // Ctrl-C
		}
		origintest.Page(w, r)
	}))
	defer origin.Close()
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf("http://r%d.test/p%d", i%3, i))
	}
	file := writeFile(t, lines...)
	dataDir := t.TempDir()
	args := append(crawlArgs(dataDir, origin, "--default-min-interval-ms", "60", "--max-concurrent-count", "4"), file)

	var stdout, stderr syncBuffer
	err := run(ctx, args, noEnv, &stdout, &stderr)
	if exitCode(err) != 130 {
		t.Fatalf("interrupted crawl: %v (exit %d), want exit 130\n%s", err, exitCode(err), stderr.String())
	}
	if !strings.Contains(stdout.String(), "not done yet") || !strings.Contains(stdout.String(), "run the same command again") {
		t.Errorf("summary of the interrupted crawl:\n%s", stdout.String())
	}
	before := len(origin.Arrivals())

	stdout = syncBuffer{}
	if err := run(context.Background(), args, noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("resumed crawl: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(squash(stdout.String()), "succeeded 30") {
		t.Errorf("resumed summary:\n%s", stdout.String())
	}
	perURL := pageArrivals(origin)
	if len(perURL) != 30 {
		t.Errorf("%d URLs fetched, want 30", len(perURL))
	}
	for u, n := range perURL {
		if n != 1 {
			t.Errorf("%s fetched %d times: a polite stop releases what it did not fetch", u, n)
		}
	}
	t.Logf("fetched %d before the interrupt, %d in all", before, len(origin.Arrivals()))
}

// TestCrawlFailsForOwnReasons: invalid lines are named and not crawled, a task that fails
// for our own reasons (the renderer cannot be reached) makes the exit status non-zero,
// while a failure on the origin's side (404) does not.
func TestCrawlFailsForOwnReasons(t *testing.T) {
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		origintest.Page(w, r)
	}))
	defer origin.Close()
	dataDir := t.TempDir()

	var stdout, stderr syncBuffer
	file := writeFile(t, "http://ok.test/", "http://ok.test/missing")
	if err := run(context.Background(), append(crawlArgs(dataDir, origin, "--default-min-interval-ms", "0"), file), noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("a 404 is the origin's failure, not ours: %v\n%s", err, stdout.String())
	}
	if !strings.Contains(stdout.String(), "http_status_error") || !strings.Contains(stdout.String(), "reached the origin") {
		t.Errorf("summary:\n%s", stdout.String())
	}

	stdout = syncBuffer{}
	stderr = syncBuffer{}
	file = writeFile(t, "ftp://nope.test/", `{"url":"http://ok.test/r","should_render":true}`, `{"url":"http://ok.test/","render":true}`, "http://ok.test/2")
	err := run(context.Background(), append(crawlArgs(dataDir, origin, "--default-min-interval-ms", "0"), file), noEnv, &stdout, &stderr)
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "own reasons") {
		t.Fatalf("err = %v (exit %d), want exit 1 for our own failure", err, exitCode(err))
	}
	for _, want := range []string{"urls.txt:1: url:", "urls.txt:3: render: unknown field"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	for _, want := range []string{"renderer_unavailable 1 our own (has_reached_origin=false)", "invalid lines 2"} {
		if !strings.Contains(squash(stdout.String()), want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout.String())
		}
	}
	var ee *exitError
	if errors.As(err, &ee) {
		t.Errorf("exit error %v, want plain 1", ee)
	}
}

// TestCrawlPolitenessCountsAdmittedRequests: the summary's politeness table counts what
// the limiter lets out (main documents and redirect hops), not a render's own
// sub-requests. Each page here is rendered in real headless Chromium and makes two XHRs
// to its own host right after it loads: they ride on the page's admission (SPEC §2), so
// the table shows two requests for the domain, a gap no smaller than its interval, and no
// domain below it.
func TestCrawlPolitenessCountsAdmittedRequests(t *testing.T) {
	t.Parallel() // owns its service, origin and data dir (longTests in main_test.go)
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no headless Chromium at %s (scripts/test.sh installs it)", chromiumPath)
	}
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"body":"more text"}`)
		case r.URL.Path == "/old":
			http.Redirect(w, r, "/p3", http.StatusFound) // a hop: admitted, counted
		default:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, `<!doctype html><html><body><p id="a">Loading</p><script>
Promise.all([fetch('/api/one').then(r => r.json()), fetch('/api/two').then(r => r.json())])
  .then(([a, b]) => { document.getElementById('a').textContent = a.body + ' ' + b.body; });
</script></body></html>`)
		}
	}))
	defer origin.Close()
	file := writeFile(t,
		`{"url":"http://xhr.test/p1","should_render":true,"min_interval_ms":300,"should_store":false}`,
		`{"url":"http://xhr.test/p2","should_render":true,"min_interval_ms":300,"should_store":false}`,
		`{"url":"http://plain.test/old","min_interval_ms":300,"should_store":false}`,
	)
	args := []string{"crawl", "--data-dir", t.TempDir(), "--connect-to", origin.ConnectTo(),
		"--chromium-path", chromiumPath, "--render-concurrency", "1", "--shutdown-grace-seconds", "5", file}
	var stdout, stderr syncBuffer
	if err := run(context.Background(), args, noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("crawl: %v\nstderr:\n%s", err, stderr.String())
	}
	xhrs := 0
	for _, a := range origin.Arrivals() {
		if strings.HasPrefix(a.Path, "/api/") {
			xhrs++
		}
	}
	if xhrs < 4 {
		t.Fatalf("the origin saw %d XHRs, want 4: the pages did not run (%v)", xhrs, origin.Arrivals())
	}
	out := squash(stdout.String())
	t.Logf("summary:\n%s", stdout.String())
	for _, want := range []string{"succeeded 3", "domains with a gap below their interval: 0 of 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout.String())
		}
	}
	// The rows: domain, requests, min gap, min_interval_ms. Each domain's robots.txt is a
	// request the limiter admitted too: robots.txt, then two pages (or a page and its hop).
	for _, row := range []string{"xhr.test 3 ", "plain.test 3 "} {
		if !strings.Contains(out, row) {
			t.Errorf("summary lacks the row %q (main documents and hops only):\n%s", row, stdout.String())
		}
	}
}

// pageArrivals counts the requests per host and path the origin saw, robots.txt aside.
func pageArrivals(o *origintest.Origin) map[string]int {
	m := map[string]int{}
	for _, a := range o.Arrivals() {
		if a.Path != "/robots.txt" {
			m[a.Host+a.Path]++
		}
	}
	return m
}

// robotsArrivals counts the robots.txt requests per host.
func robotsArrivals(o *origintest.Origin) map[string]int {
	m := map[string]int{}
	for _, a := range o.Arrivals() {
		if a.Path == "/robots.txt" {
			m[a.Host]++
		}
	}
	return m
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nlnwa/gowarc/v3"

	"downloader/internal/testkit"
	"downloader/origintest"
)

// buildBinary returns this command built with `go build`: the tests that run the program
// as an operator does (real signals, its own RSS, a crawl) use it. It is built once per
// test binary, started by TestMain into a directory it makes and removes (every build
// after the first was a link of ~2 s, more under load, that each such test paid again),
// in the background, while the tests before the first that needs it run.
func buildBinary(t testing.TB) string {
	t.Helper()
	return pkgBinary.Path(t)
}

// TestCrawlOutputsSurviveSignals runs the built binary on a list, stops it with SIGINT or
// SIGTERM at seeded random moments (after a random number of page arrivals, or right
// after start), and checks after every stop: the exit status (130, 143; 0 when it had
// finished), that --output and --warc are complete for what was done and valid (every
// line JSON, one per task; the WARC readable by gowarc with right digests, one response
// per stored page), that neither shrank, and that no temporary file is left. A last run
// finishes the crawl, fetching no page twice.
func TestCrawlOutputsSurviveSignals(t *testing.T) {
	t.Parallel() // owns its service, origin and data dir (longTests in main_test.go)
	if testing.Short() {
		t.Skip("builds the binary")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DOWNLOADER_TEST_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (DOWNLOADER_TEST_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	arrived := make(chan struct{}, 1000)
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/robots.txt" {
			arrived <- struct{}{}
		}
		origintest.Page(w, r)
	}))
	defer origin.Close()
	const taskCount = 40
	var lines []string
	for i := range taskCount {
		lines = append(lines, fmt.Sprintf("http://s%d.test/p%d", i%4, i))
	}
	list := writeFile(t, lines...)
	dataDir := t.TempDir()
	outDir := t.TempDir()
	results := filepath.Join(outDir, "results.jsonl")
	warc := filepath.Join(outDir, "pages.warc.gz")
	bin := buildBinary(t)
	args := append(crawlArgs(dataDir, origin, "--default-min-interval-ms", "60", "--max-concurrent-count", "4",
		"--output", results, "--warc", warc), list)

	prevDone, prevLines, fetched := 0, 0, 0
	for round := range 5 {
		last := round == 4
		sig := syscall.SIGINT
		if round == 2 {
			sig = syscall.SIGTERM
		}
		after := 0 // page arrivals before the signal; 0: right after start
		if left := taskCount - fetched; !last && left > 1 {
			after = rng.IntN(left / 2)
		}
		cmd := exec.Command(bin, args...)
		stderr := &testkit.NotifyBuffer{}
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if !last {
			deadline := time.After(2 * time.Minute)
			if !stderr.WaitFor("console on", deadline) {
				cmd.Process.Kill()
				<-done
				t.Fatalf("round %d: no start:\n%s", round, stderr.String())
			}
		wait:
			for range after {
				select {
				case <-arrived:
					fetched++
				case <-deadline:
					t.Fatalf("round %d: %d arrivals did not come", round, after)
				case <-done:
					break wait // finished already
				}
			}
			cmd.Process.Signal(sig)
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			<-done
			t.Fatalf("round %d: no exit after %v:\n%s", round, sig, stderr.String())
		}
	drain:
		for {
			select {
			case <-arrived:
				fetched++
			default:
				break drain
			}
		}
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		got := readOutput(t, results)
		doneCount := 0
		pageCount := 0
		for _, l := range got {
			if l["state"] == "done" {
				doneCount++
			}
			if l["page_key"] != nil {
				pageCount++
			}
		}
		t.Logf("round %d: %v after %d arrivals: exit %d, %d lines, %d done, %d fetched", round, sig, after, code, len(got), doneCount, fetched)
		wantCode := 128 + int(sig)
		if last {
			wantCode = 0
		}
		// A signal that raced with the crawl's end may find it finished (0) or not.
		if code != wantCode && !(code == 0 && doneCount == taskCount) {
			t.Errorf("round %d: exit %d, want %d\n%s", round, code, wantCode, stderr.String())
		}
		if len(got) < prevLines || doneCount < prevDone {
			t.Errorf("round %d: output shrank: %d lines %d done, before %d lines %d done", round, len(got), doneCount, prevLines, prevDone)
		}
		if len(got) != 0 && len(got) != taskCount {
			t.Errorf("round %d: %d lines, want one per task (%d)", round, len(got), taskCount)
		}
		if responses := checkWARCFile(t, warc); responses != pageCount {
			t.Errorf("round %d: %d WARC responses, %d stored pages in the JSON lines", round, responses, pageCount)
		}
		if stdout.Len() == 0 {
			t.Errorf("round %d: no summary on standard output", round)
		}
		tmp, _ := filepath.Glob(filepath.Join(outDir, ".*.tmp-*"))
		if len(tmp) > 0 {
			t.Errorf("round %d: temporary files left: %v", round, tmp)
		}
		prevDone, prevLines = doneCount, len(got)
	}
	if prevDone != taskCount {
		t.Errorf("after the last run %d of %d tasks are done", prevDone, taskCount)
	}
	for u, n := range pageArrivals(origin) {
		if n != 1 {
			t.Errorf("%s fetched %d times", u, n)
		}
	}
}

// readOutput parses a JSON lines file (none: no lines).
func readOutput(t *testing.T, path string) []map[string]any {
	t.Helper()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return readLines(t, path)
}

// checkWARCFile reads a .warc.gz with gowarc, failing on any syntax, spec or digest error,
// and returns its count of response records (0 when there is no file).
func checkWARCFile(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := gowarc.NewUnmarshaler(gowarc.WithStrictValidation())
	r := bufio.NewReader(f)
	responses, records := 0, 0
	for {
		rec, _, validation, err := u.Unmarshal(r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: record %d: %v %v", path, records+1, err, validation)
		}
		if len(validation) > 0 {
			t.Errorf("%s: record %d: %v", path, records+1, validation)
		}
		if rec.Type() == gowarc.Response {
			responses++
		}
		records++
		rec.Close()
	}
	if records == 0 {
		t.Errorf("%s: no records", path)
	}
	return responses
}

// TestCrawlOutputToStandardOutput: with --output - standard output carries the JSON lines
// alone; the summary and progress go to standard error.
func TestCrawlOutputToStandardOutput(t *testing.T) {
	origin := origintest.New(nil)
	defer origin.Close()
	file := writeFile(t, "http://o1.test/a", "http://o2.test/b")
	var stdout, stderr syncBuffer
	if err := run(t.Context(), append(crawlArgs(t.TempDir(), origin, "--output", "-"), file), noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("crawl: %v\n%s", err, stderr.String())
	}
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	n := 0
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Errorf("standard output line %d is not JSON: %q", n+1, sc.Text())
		}
		n++
	}
	if n != 2 {
		t.Errorf("%d JSON lines on standard output, want 2:\n%s", n, stdout.String())
	}
	if !strings.Contains(stderr.String(), "crawl summary") {
		t.Errorf("no summary on standard error:\n%s", stderr.String())
	}
}

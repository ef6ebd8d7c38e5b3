package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"downloader/internal/testkit"
	"downloader/store/tikv/tikvtest"
)

// pkgBinary is the command built once for the whole test binary, started by TestMain
// (buildBinary).
var pkgBinary *testkit.Build

// buildFirst makes m.Run stop the build when the tests are done, before goleak looks for
// goroutines left behind: a run that needed no binary cancels it.
type buildFirst struct{ m *testing.M }

func (b buildFirst) Run() int {
	code := b.m.Run()
	pkgBinary.Stop()
	return code
}

func TestMain(m *testing.M) {
	if err := tikvtest.Init(); err != nil { // cluster mode's tests run the mock TiKV cluster
		panic(err)
	}
	dir, err := os.MkdirTemp("", "downloader-bin-")
	if err != nil {
		panic(err)
	}
	if os.Getenv(netnsChildEnv) == "" {
		pkgBinary = testkit.StartServiceBuild(".", filepath.Join(dir, "downloader"))
	} else {
		// The network namespace's child runs one test, which needs no binary: a build
		// there was a second link of the service beside the parent's.
		pkgBinary = testkit.NoBuild()
	}
	goleak.VerifyTestMain(buildFirst{m}, tikvtest.IgnoreClosedCluster,
		// Pebble's and chromedp's background workers end asynchronously after Close.
		goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/v2.(*DB).maybeScheduleCompaction"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
		goleak.Cleanup(func(code int) {
			os.RemoveAll(dir)
			os.Exit(code)
		}),
	)
}

// testService is the real program started by run on 127.0.0.1:0 in a temp data dir.
type testService struct {
	base   string
	stderr *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

// startService runs `downloader serve` with args and waits until it listens and is ready.
func startTestService(t *testing.T, args ...string) *testService {
	t.Helper()
	dataDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	s := &testService{stderr: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	all := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--shutdown-grace-seconds", "5"}, args...)
	go func() {
		err := run(ctx, all, func(string) string { return "" }, pw, s.stderr)
		pw.Close()
		s.done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	go io.Copy(io.Discard, pr)
	if err != nil {
		cancel()
		t.Fatalf("service did not start: %v\n%s", err, s.stderr.String())
	}
	s.base = strings.TrimSpace(strings.TrimPrefix(line, "downloader: listening on "))
	t.Cleanup(func() { s.stop(t) })
	resp, err := http.Get(s.base + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("not ready: %v %v", resp, err)
	}
	resp.Body.Close()
	return s
}

func (s *testService) stop(t *testing.T) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	if err := <-s.done; err != nil {
		t.Errorf("service stopped with error: %v", err)
	}
}

// post sends a JSON body and decodes a JSON object answer.
func (s *testService) post(t *testing.T, path, body string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.Post(s.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("POST %s: answer is not JSON: %v", path, err)
	}
	return resp, m
}

func (s *testService) get(t *testing.T, path string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(s.base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func (s *testService) put(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, s.base+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestFlagsFromEnvironmentAndHelp(t *testing.T) {
	var c config
	var stderr bytes.Buffer
	fs := newFlagSet("serve", &c, &stderr)
	env := map[string]string{"DOWNLOADER_MAX_CONCURRENT_COUNT": "9", "DOWNLOADER_LISTEN": "127.0.0.1:1"}
	if err := parseFlags(fs, &c, []string{"--listen", "127.0.0.1:2"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.MaxConcurrentCount != 9 {
		t.Errorf("max_concurrent_count = %d, want 9 from the environment", c.MaxConcurrentCount)
	}
	if c.Listen != "127.0.0.1:2" {
		t.Errorf("listen = %q: the command line must win over the environment", c.Listen)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"serve", "--help"}, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("serve --help: %v", err)
	}
	for _, name := range []string{"listen", "data-dir", "default-min-interval-ms", "max-concurrent-count",
		"local-queue-length", "connect-to", "allow-private-networks", "user-agent",
		"render-max-subrequest-count", "render-max-host-subrequest-count"} {
		if !strings.Contains(errOut.String(), "-"+name) {
			t.Errorf("serve --help does not document --%s", name)
		}
	}
	bad := []struct{ args []string }{
		{[]string{"--max-concurrent-count", "0"}},
		{[]string{"--default-min-interval-ms", "-1"}},
		{[]string{"--connect-to", "nonsense"}},
		{[]string{"--render-max-subrequest-count", "0"}},
		{[]string{"--render-max-host-subrequest-count", "0"}},
	}
	for _, b := range bad {
		var c config
		fs := newFlagSet("serve", &c, io.Discard)
		if err := parseFlags(fs, &c, b.args, func(string) string { return "" }); err == nil {
			t.Errorf("%v: no error", b.args)
		}
	}
}

func TestSettingsSurviveARestart(t *testing.T) {
	dataDir := t.TempDir()
	start := func() *testService {
		return startTestService(t, "--data-dir", dataDir)
	}
	s := start()
	if code, m := s.put(t, "/v1/settings", `{"max_concurrent_count":5}`); code != 200 || m["max_concurrent_count"] != float64(5) {
		t.Fatalf("put settings: %d %v", code, m)
	}
	s.stop(t)
	s = start()
	if _, m := s.get(t, "/v1/settings"); m["max_concurrent_count"] != float64(5) {
		t.Errorf("after restart: %v, want 5", m)
	}
}

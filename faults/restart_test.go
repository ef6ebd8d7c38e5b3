package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"downloader"
	"downloader/internal/testkit"
	"downloader/localqueue"
	"downloader/origintest"
	"downloader/outbox"
	"downloader/store/embedded"
)

// The restart tests run the real program, built with `go build`, as a child process in a
// process group of its own (so that its browser's processes can be counted and, if a test
// fails, killed with it), with a TMPDIR of its own (so that the browser's temporary
// directories can be checked).

// build is cmd/downloader, built once per test run, started by TestMain (binary).
var build *testkit.Build

// startBuild starts building cmd/downloader into a directory of tmpRoot the suite keeps
// until the end, while the tests before the first that runs it go on.
func startBuild() error {
	dir, err := os.MkdirTemp(tmpRoot, "bin-")
	if err != nil {
		return err
	}
	keptDirs[filepath.Base(dir)] = true
	build = testkit.StartServiceBuild("..", filepath.Join(dir, "downloader"))
	return nil
}

// binary returns cmd/downloader built.
func binary(t *testing.T) string {
	t.Helper()
	return build.Path(t)
}

// child is a running downloader.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	base   string
	tmp    string                // its TMPDIR
	stderr *testkit.NotifyBuffer // wait for a line with WaitWithin: os/exec copies the pipe on a goroutine of its own
	done   chan struct{}
	err    error // after done
}

// startChild runs `downloader serve` on dataDir with args, and waits until it listens.
func startChild(t *testing.T, dataDir, tmp string, args ...string) *child {
	t.Helper()
	all := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--log-level", "info"}, args...)
	cmd := exec.Command(binary(t), all...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c := &child{t: t, cmd: cmd, tmp: tmp, stderr: &testkit.NotifyBuffer{}, done: make(chan struct{})}
	cmd.Stderr = c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // our child's process group
			<-c.done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the downloader did not start: %v\n%s", err, c.stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	c.base = strings.TrimSpace(strings.TrimPrefix(line, "downloader: listening on "))
	return c
}

// stop sends sig and waits up to d for the process to end; it returns the exit code.
func (c *child) stop(sig syscall.Signal, d time.Duration) int {
	c.t.Helper()
	c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(d):
		c.t.Fatalf("the downloader did not exit within %v of %v\n%s", d, sig, c.stderr.String())
	}
	if c.cmd.ProcessState == nil {
		return -1
	}
	return c.cmd.ProcessState.ExitCode()
}

// browsersLeft lists the browser processes of c's process group.
func (c *child) browsersLeft() []int { return browserProcesses(c.cmd.Process.Pid) }

var apiClient = &http.Client{Timeout: time.Minute}

func (c *child) post(path, body string) (int, map[string]any, error) {
	resp, err := apiClient.Post(c.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	err = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m, err
}

// submit queues tasks through POST /v1/tasks.
func (c *child) submit(t *testing.T, tasks []map[string]any) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"tasks": tasks})
	status, m, err := c.post("/v1/tasks", string(b))
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit: %d %v %v", status, m, err)
	}
}

// restartOrigin is the origin of the restart tests: every host answers a page after a
// short delay (so that tasks are in flight at any moment), hang.test never answers, and
// slowish.test answers after 800 ms.
func restartOrigin(t *testing.T) *origintest.Origin {
	closing := make(chan struct{})
	o := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delay := 100 * time.Millisecond
		switch strings.Split(r.Host, ":")[0] {
		case "hang.test":
			select {
			case <-r.Context().Done():
			case <-closing:
			}
			return
		case "slowish.test":
			delay = 800 * time.Millisecond
		}
		tm := time.NewTimer(delay)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-r.Context().Done():
			return
		case <-closing:
			return
		}
		origintest.Page(w, r)
	}))
	t.Cleanup(func() {
		close(closing)
		o.Close()
	})
	return o
}

// tasksFor makes domainCount × perDomain tasks (r<i>.test/p<j>) with intervalMs.
func tasksFor(domainCount, perDomain int, intervalMs int64) ([]map[string]any, map[string]time.Duration) {
	var tasks []map[string]any
	intervals := map[string]time.Duration{}
	for d := range domainCount {
		host := fmt.Sprintf("r%d.test", d)
		intervals[host] = time.Duration(intervalMs) * time.Millisecond
		for p := range perDomain {
			tasks = append(tasks, map[string]any{"task_id": fmt.Sprintf("%s-%d", host, p),
				"url": fmt.Sprintf("http://%s/p%d", host, p), "min_interval_ms": intervalMs})
		}
	}
	return tasks, intervals
}

// storeState is what a stopped downloader left in its data dir.
type storeState struct {
	counts        localqueue.Counts
	requeuedLog   string // the queue's log line about leases of the previous run, if any
	outboxCount   int
	doneTaskIDs   map[string]bool
	resultTaskIDs map[string]int // fetch_result records per task
}

// inspect opens the data dir of a stopped downloader (which proves its store was closed:
// the store is locked while open) and reads the queue, the outbox and the results.
func inspect(t *testing.T, dataDir string) storeState {
	t.Helper()
	var log bytes.Buffer
	st, err := embedded.Open(filepath.Join(dataDir, "store"), nil)
	if err != nil {
		t.Fatalf("open the store of the stopped downloader: %v", err)
	}
	defer st.Close()
	ctx := context.Background()
	var s storeState
	if s.outboxCount, err = outbox.New(st).ReportCount(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := localqueue.Open(ctx, st, localqueue.Config{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "leases of the previous run") {
			s.requeuedLog = line
		}
	}
	s.counts = q.Counts()
	s.doneTaskIDs = map[string]bool{}
	err = q.RangeDone(ctx, func(task *downloader.Task, r *downloader.Report) bool {
		if r == nil || r.TaskID != task.TaskID {
			t.Errorf("done task %s has report %+v", task.TaskID, r)
		}
		s.doneTaskIDs[task.TaskID] = true
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	s.resultTaskIDs = map[string]int{}
	cursor := ""
	for {
		rs, next, err := st.FetchResults(ctx, "", 1000, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Entry == downloader.EntryLease {
				s.resultTaskIDs[r.TaskID]++
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	return s
}

// waitArrivals waits until the origin has seen at least n requests to hosts r*.test.
func waitArrivals(t *testing.T, o *origintest.Origin, n int, d time.Duration) {
	t.Helper()
	count := func() int {
		c := 0
		for _, a := range o.Arrivals() {
			if strings.HasPrefix(a.Host, "r") {
				c++
			}
		}
		return c
	}
	if !testkit.Eventually(d, func() bool { return count() >= n }) {
		t.Fatalf("the origin saw %d task requests in %v, want %d", count(), d, n)
	}
}

// checkPolite fails t if the origin saw two requests to one host closer than its interval.
func checkPolite(t *testing.T, o *origintest.Origin, intervals map[string]time.Duration) {
	t.Helper()
	const tolerance = 2 * time.Millisecond
	v := o.Violations(func(h string) (time.Duration, bool) { d, ok := intervals[h]; return d, ok }, tolerance)
	if len(v) > 0 {
		t.Errorf("%d domains hit early: %v", len(v), v)
		bad := map[string]bool{}
		for _, x := range v {
			bad[x.Host] = true
		}
		arr := o.Arrivals()
		for _, a := range arr {
			if bad[a.Host] {
				t.Logf("  %s %s at +%v", a.Host, a.Path, a.At.Sub(arr[0].At).Round(time.Millisecond))
			}
		}

	}
}

// TestSIGTERMDuringLoad is a clean stop under load: SIGTERM while entries A, B and C are busy. An
// in-flight request that can finish within the grace period finishes; one that cannot is
// answered shutting_down (has_reached_origin=false); leases are handed back; reports are
// flushed; the store is closed; the browser and its temporary directory are gone; and a
// restart finishes every task with no domain hit early.
func TestSIGTERMDuringLoad(t *testing.T) {
	noLeaks(t)
	o := restartOrigin(t)
	dataDir, tmp := t.TempDir(), t.TempDir()
	// The grace period is long enough for the 800 ms probe on a loaded machine.
	args := []string{"--connect-to", o.ConnectTo(), "--shutdown-grace-seconds", "4", "--max-concurrent-count", "8",
		"--render-concurrency", "1"}
	c := startChild(t, dataDir, tmp, args...)
	tasks, intervals := tasksFor(10, 6, 200)
	c.submit(t, tasks)
	waitArrivals(t, o, 15, 30*time.Second)

	// B into a page that never answers, C into one that answers within the grace period.
	type answer struct {
		status int
		m      map[string]any
		err    error
	}
	hung, slowish := make(chan answer, 1), make(chan answer, 1)
	go func() {
		s, m, err := c.post("/v1/render", `{"url":"http://hang.test/","should_render":false,"timeout_ms":60000,"min_interval_ms":0}`)
		hung <- answer{s, m, err}
	}()
	go func() {
		s, m, err := c.post("/v1/probe", `{"url":"http://slowish.test/","min_interval_ms":0}`)
		slowish <- answer{s, m, err}
	}()
	if !testkit.Eventually(30*time.Second, func() bool { return o.CountByHost()["hang.test"] == 1 && o.CountByHost()["slowish.test"] == 1 }) {
		t.Fatal("B and C did not reach the origin")
	}
	start := time.Now()
	t.Logf("SIGTERM at +%v", start.Sub(o.Arrivals()[0].At).Round(time.Millisecond))
	if code := c.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0\n%s", code, c.stderr.String())
	}
	t.Logf("stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))

	if a := <-slowish; a.err != nil || a.status != 200 || a.m["fail_reason"] != nil {
		t.Errorf("C in flight within the grace period: %d %v %v, want it finished normally", a.status, a.m, a.err)
	}
	if a := <-hung; a.err != nil || a.status != 200 || a.m["fail_reason"] != "shutting_down" || a.m["has_reached_origin"] != false {
		t.Errorf("B in flight past the grace period: %d %v %v, want 200 shutting_down, not reached", a.status, a.m, a.err)
	}
	if procs := c.browsersLeft(); len(procs) > 0 {
		t.Errorf("browser processes left after SIGTERM: %v", procs)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) > 0 {
		t.Errorf("temporary directories left after SIGTERM: %v", entries)
	}
	for _, want := range []string{`"msg":"lease loop stopped"`, `"msg":"stopped"`} {
		if !strings.Contains(c.stderr.String(), want) {
			t.Errorf("the log lacks %s", want)
		}
	}

	s := inspect(t, dataDir)
	if s.requeuedLog != "" || s.counts.LeasedCount != 0 {
		t.Errorf("leases not handed back: leased_count %d, %s", s.counts.LeasedCount, s.requeuedLog)
	}
	if s.outboxCount != 0 {
		t.Errorf("%d reports left in the outbox: not flushed", s.outboxCount)
	}
	if s.counts.TotalCount() != len(tasks) || s.counts.DoneCount == 0 || s.counts.PendingCount == 0 {
		t.Errorf("queue %+v after the stop, want %d tasks, some done and some pending", s.counts, len(tasks))
	}
	for id := range s.doneTaskIDs {
		if s.resultTaskIDs[id] == 0 {
			t.Errorf("task %s is done but has no fetch_result", id)
		}
	}
	t.Logf("at SIGTERM: %d done, %d pending", s.counts.DoneCount, s.counts.PendingCount)

	// Restart: the rest is done, nothing lost, nothing early.
	c = startChild(t, dataDir, tmp, args...)
	if !testkit.Eventually(60*time.Second, func() bool {
		status, m, err := c.get("/v1/fetch_results?limit=1000")
		return err == nil && status == 200 && countLeaseTasks(m) >= len(tasks)
	}) {
		t.Fatalf("the restarted downloader did not finish the tasks\n%s", c.stderr.String())
	}
	if code := c.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after the second SIGTERM", code)
	}
	s = inspect(t, dataDir)
	if s.counts.DoneCount != len(tasks) || len(s.doneTaskIDs) != len(tasks) || s.outboxCount != 0 {
		t.Errorf("after the restart: %+v, %d done, outbox %d; want all %d done", s.counts, len(s.doneTaskIDs), s.outboxCount, len(tasks))
	}
	for _, task := range tasks {
		id := task["task_id"].(string)
		if s.resultTaskIDs[id] == 0 {
			t.Errorf("task %s has no fetch_result", id)
		}
	}
	checkPolite(t, o, intervals)
	if entries, _ := os.ReadDir(tmp); len(entries) > 0 {
		t.Errorf("temporary directories left: %v", entries)
	}
}

// TestKill9DuringLoad is a crash under load: kill -9 while tasks are in flight, then
// restart on the same data dir. The conservative rebuild holds at the origin (no domain
// is hit before its interval has passed since its last request of the killed run, though
// the limiter's table was lost); no task is lost (leased ones return to pending); no
// report is lost (every task ends done with a report and a fetch_result); the killed
// run's browser dies with it.
func TestKill9DuringLoad(t *testing.T) {
	noLeaks(t)
	o := restartOrigin(t)
	dataDir, tmp := t.TempDir(), t.TempDir()
	// A long interval, so that a restart (well under it) would hit every domain early
	// without the conservative rebuild.
	const intervalMs = 2500
	args := []string{"--connect-to", o.ConnectTo(), "--shutdown-grace-seconds", "2", "--max-concurrent-count", "16",
		"--render-concurrency", "1"}
	c := startChild(t, dataDir, tmp, args...)
	tasks, intervals := tasksFor(12, 3, intervalMs)
	c.submit(t, tasks)
	// The first wave (one request per domain) is out; kill while some are still in flight
	// (the origin holds each for 100 ms).
	waitArrivals(t, o, 10, 30*time.Second)
	pgid := c.cmd.Process.Pid
	killedAt := time.Now()
	c.stop(syscall.SIGKILL, 30*time.Second)
	if !testkit.Eventually(10*time.Second, func() bool { return len(browserProcesses(pgid)) == 0 }) {
		t.Errorf("the killed downloader's browser processes live on: %v", browserProcesses(pgid))
	}
	before := len(o.Arrivals())

	c = startChild(t, dataDir, tmp, args...)
	t.Logf("restarted %v after the kill, %d requests before it", time.Since(killedAt).Round(time.Millisecond), before)
	if !testkit.Eventually(60*time.Second, func() bool {
		status, m, err := c.get("/v1/fetch_results?limit=1000")
		return err == nil && status == 200 && countLeaseTasks(m) >= len(tasks)
	}) {
		t.Fatalf("the restarted downloader did not finish the tasks\n%s", c.stderr.String())
	}
	if code := c.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	s := inspect(t, dataDir)
	if s.counts.DoneCount != len(tasks) || len(s.doneTaskIDs) != len(tasks) || s.outboxCount != 0 || s.counts.LeasedCount != 0 {
		t.Errorf("after the restart: %+v, %d done, outbox %d; want all %d done", s.counts, len(s.doneTaskIDs), s.outboxCount, len(tasks))
	}
	for _, task := range tasks {
		id := task["task_id"].(string)
		if s.resultTaskIDs[id] == 0 {
			t.Errorf("task %s has no fetch_result: a report was lost", id)
		}
	}
	checkPolite(t, o, intervals)
	if !strings.Contains(c.stderr.String(), "leases of the previous run returned to pending") {
		t.Log("no lease was outstanding at the kill (every first-wave task had been reported)")
	}
	// The killed run could not remove its browser's user data directory; the restarted
	// run swept it at its browser's launch and removed its own at the clean stop.
	if entries, _ := os.ReadDir(tmp); len(entries) > 0 {
		t.Errorf("temporary directories left after kill -9, restart and a clean stop: %v, want none", entries)
	}
	os.RemoveAll(tmp)
}

func (c *child) get(path string) (int, map[string]any, error) {
	resp, err := apiClient.Get(c.base + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	err = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m, err
}

// countLeaseTasks counts the distinct tasks among entry A's fetch_result records.
func countLeaseTasks(m map[string]any) int {
	ids := map[any]bool{}
	list, _ := m["fetch_results"].([]any)
	for _, r := range list {
		if rm, ok := r.(map[string]any); ok && rm["entry"] == "a" {
			ids[rm["task_id"]] = true
		}
	}
	return len(ids)
}

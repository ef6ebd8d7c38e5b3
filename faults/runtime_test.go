package faults

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"downloader/internal/testkit"
	"downloader/origintest"
)

// The restart tests of downloader:domain_runtime (SPEC §2, loss and rebuild) and the drain
// on SIGTERM, against the built binary on one data dir.

// probe sends entry C a plain probe of url with interval ms and returns its answer.
func (c *child) probe(t *testing.T, url string, intervalMs int) map[string]any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"url": url, "min_interval_ms": intervalMs})
	status, m, err := c.post("/v1/probe", string(body))
	if err != nil || status != http.StatusOK {
		t.Fatalf("probe %s: %d %v %v\n%s", url, status, m, err, c.stderr.String())
	}
	return m
}

// mustReach fails t unless the probe reached the origin and succeeded.
func mustReach(t *testing.T, m map[string]any, what string) {
	t.Helper()
	if m["has_reached_origin"] != true || m["fail_reason"] != nil {
		t.Errorf("%s: %v, want it sent at once", what, m)
	}
}

// mustBeRefused fails t unless our own limiter refused the probe.
func mustBeRefused(t *testing.T, m map[string]any, what string) {
	t.Helper()
	if m["has_reached_origin"] != false || m["fail_reason"] != "self_rate_limited" {
		t.Errorf("%s: %v, want self_rate_limited", what, m)
	}
}

func (c *child) put(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, c.base+path, strings.NewReader(body))
	resp, err := apiClient.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// checkMaxConcurrent fails t unless the service runs with max_concurrent_count n.
func (c *child) checkMaxConcurrent(t *testing.T, n int, when string) {
	t.Helper()
	status, m, err := c.get("/v1/settings")
	if err != nil || status != http.StatusOK || m["max_concurrent_count"] != float64(n) {
		t.Errorf("%s: settings %d %v %v, want max_concurrent_count %d", when, status, m, err, n)
	}
}

// TestRestartWaitsOnlyAsSafetyNeeds: a fresh data dir waits for nothing; a clean stop
// keeps the limiter's entries exactly (a domain whose interval passed before the stop
// goes at once after the restart, one hit just before the stop is refused); kill -9 then
// an immediate restart refuses (the loss counts from the killed process's last
// heartbeat); max_concurrent_count, changed online, is kept across all of them.
func TestRestartWaitsOnlyAsSafetyNeeds(t *testing.T) {
	noLeaks(t)
	o := origintest.New(http.HandlerFunc(origintest.Page))
	t.Cleanup(o.Close)
	dataDir, tmp := t.TempDir(), t.TempDir()
	args := []string{"--connect-to", o.ConnectTo(), "--max-concurrent-count", "8", "--shutdown-grace-seconds", "5"}

	// Fresh data dir: the first request goes at once, whatever its interval.
	c := startChild(t, dataDir, tmp, args...)
	mustReach(t, c.probe(t, "http://fresh.test/", 5000), "first probe on a fresh data dir, 5 s interval")
	mustReach(t, c.probe(t, "http://early.test/", 1500), "first probe of early.test")
	earlyAt := time.Now()
	if status, m := c.put(t, "/v1/settings", `{"max_concurrent_count":5}`); status != http.StatusOK {
		t.Fatalf("PUT /v1/settings: %d %v", status, m)
	}
	// early.test's 1.5 s interval passes before the stop; late.test is hit just before it.
	if !testkit.Eventually(30*time.Second, func() bool { return time.Since(earlyAt) >= 2*time.Second }) {
		t.Fatal("unreachable")
	}
	mustReach(t, c.probe(t, "http://late.test/", 60_000), "late.test before the stop")
	_, before, _ := c.get("/v1/domains/late.test")
	if code := c.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, c.stderr.String())
	}
	if !strings.Contains(c.stderr.String(), `"msg":"domain_runtime saved"`) {
		t.Errorf("the clean stop did not save domain_runtime\n%s", c.stderr.String())
	}

	// Restart after the clean stop: exactly the state before it.
	c = startChild(t, dataDir, tmp, args...)
	if !c.stderr.WaitWithin(`"runtime_start":"clean_stop"`, 30*time.Second) {
		t.Errorf("the start does not say it restored a clean stop\n%s", c.stderr.String())
	}
	mustReach(t, c.probe(t, "http://early.test/", 1500), "early.test after the restart (hit 2 s before the stop, 1.5 s interval)")
	mustBeRefused(t, c.probe(t, "http://late.test/", 60_000), "late.test after the restart (hit just before the stop, 60 s interval)")
	mustReach(t, c.probe(t, "http://never.test/", 60_000), "a domain never requested, after a clean stop")
	_, after, _ := c.get("/v1/domains/late.test")
	if before["last_request_at"] == nil || after["last_request_at"] != before["last_request_at"] || after["rebuild_loss_at"] != nil {
		t.Errorf("late.test after the restart: %v; before the stop: %v; want the same last_request_at and no rebuild", after, before)
	}
	c.checkMaxConcurrent(t, 5, "after SIGTERM and restart")

	// kill -9, then restart at once: the killed process's last sign of life decides.
	mustReach(t, c.probe(t, "http://crash.test/", 60_000), "crash.test before the kill")
	c.stop(syscall.SIGKILL, 30*time.Second)
	c = startChild(t, dataDir, tmp, args...)
	if !c.stderr.WaitWithin(`"runtime_start":"crashed"`, 30*time.Second) {
		t.Errorf("the start does not say it followed a crash\n%s", c.stderr.String())
	}
	mustBeRefused(t, c.probe(t, "http://crash.test/", 60_000), "crash.test right after kill -9 and restart")
	mustBeRefused(t, c.probe(t, "http://other.test/", 60_000), "a domain unknown to the new process, right after kill -9")
	_, m, _ := c.get("/v1/domains/other.test")
	if m["last_request_at"] != nil || m["rebuild_loss_at"] == nil {
		t.Errorf("other.test after the crash: %v, want no last_request_at and a rebuild_loss_at", m)
	}
	c.checkMaxConcurrent(t, 5, "after kill -9 and restart")
	if code := c.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}

	counts := o.CountByHost()
	for host, want := range map[string]int{"fresh.test": 1, "early.test": 2, "late.test": 1, "never.test": 1, "crash.test": 1, "other.test": 0} {
		if counts[host] != want {
			t.Errorf("the origin saw %d requests to %s, want %d", counts[host], host, want)
		}
	}
}

// TestDrainOnSIGTERM: during SIGTERM's grace period the listener stays open, /readyz
// answers 503, a new B request gets 503 shutting_down, a new C request gets 200
// shutting_down (not reached), the request in flight finishes, and then the process ends.
func TestDrainOnSIGTERM(t *testing.T) {
	noLeaks(t)
	release := make(chan struct{})
	o := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Host, "hold.test") {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		origintest.Page(w, r)
	}))
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
		o.Close()
	})
	dataDir, tmp := t.TempDir(), t.TempDir()
	c := startChild(t, dataDir, tmp, "--connect-to", o.ConnectTo(), "--shutdown-grace-seconds", "60")

	type answer struct {
		status int
		m      map[string]any
		err    error
	}
	held := make(chan answer, 1)
	go func() {
		s, m, err := c.post("/v1/render", `{"url":"http://hold.test/","should_render":false,"min_interval_ms":0}`)
		held <- answer{s, m, err}
	}()
	if !testkit.Eventually(30*time.Second, func() bool { return o.CountByHost()["hold.test"] == 1 }) {
		t.Fatal("the held request did not reach the origin")
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	if !testkit.Eventually(30*time.Second, func() bool {
		resp, err := apiClient.Get(c.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	}) {
		t.Fatalf("/readyz did not turn 503 after SIGTERM\n%s", c.stderr.String())
	}

	resp, err := apiClient.Post(c.base+"/v1/render", "application/json", strings.NewReader(`{"url":"http://new.test/","should_render":false}`))
	if err != nil {
		t.Fatalf("B during the grace period: %v (the listener must stay open)", err)
	}
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || m["fail_reason"] != "shutting_down" || m["retry_after_seconds"] == nil ||
		resp.Header.Get("Retry-After") == "" {
		t.Errorf("B during the grace period: %d %v, want 503 shutting_down with a retry_after_seconds", resp.StatusCode, m)
	}
	status, m, err := c.post("/v1/probe", `{"url":"http://new.test/"}`)
	if err != nil || status != http.StatusOK || m["fail_reason"] != "shutting_down" || m["has_reached_origin"] != false {
		t.Errorf("C during the grace period: %d %v %v, want 200 shutting_down, not reached", status, m, err)
	}
	select {
	case <-c.done:
		t.Fatal("the process ended with a request in flight, within the grace period")
	default:
	}

	close(release)
	released = true
	if a := <-held; a.err != nil || a.status != http.StatusOK || a.m["fail_reason"] != nil || a.m["has_reached_origin"] != true {
		t.Errorf("the request in flight: %d %v %v, want it finished normally", a.status, a.m, a.err)
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the process did not end once nothing was in flight\n%s", c.stderr.String())
	}
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	if n := o.CountByHost()["new.test"]; n != 0 {
		t.Errorf("the origin saw %d requests made during the drain", n)
	}
}

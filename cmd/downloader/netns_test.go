package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"downloader/origintest"
)

// netnsChildEnv marks the test binary re-executed inside its own network namespace.
const netnsChildEnv = "DOWNLOADER_NETNS_CHILD"

// netnsAddr is the public-looking address the namespace puts on its loopback interface.
const netnsAddr = "11.22.33.44"

// netnsSpellings are one address, netnsAddr, as URLs may write it (SPEC §2: one
// canonical host, so one key).
var netnsSpellings = []string{
	"11.22.33.44", "0x0b16212c", "185999660", "013.026.041.054", "11.22.8492", "0xb.0x16.0x21.0x2c",
	"１１．２２．３３．４４", "11.22.33.44.", "0XB.026.8492",
}

// TestOneAddressOneKeyInANetworkNamespace is the black-box test of SPEC §2's canonical
// host: in a network namespace the test makes itself (only lo, with 11.22.33.44 added to
// it, so no packet can leave the machine), an origin listens on 11.22.33.44:80 and
// stamps arrivals with the kernel's receive time; the real service, with no --connect-to
// rule, gets one address in nine spellings through A (POST /v1/tasks), B (POST
// /v1/render, fetched and rendered) and C (POST /v1/probe) at min_interval_ms 1000. The
// limiter must hold one domain, and the origin must never see two requests closer than
// the interval.
//
// It needs root and unshare(1): elsewhere it is skipped with a message, and in CI it
// fails.
func TestOneAddressOneKeyInANetworkNamespace(t *testing.T) {
	t.Parallel() // owns its service, origin and data dir (longTests in main_test.go)
	if os.Getenv(netnsChildEnv) == "" {
		runInNetns(t)
		return
	}
	netnsChild(t)
}

// runInNetns re-executes this test in a new network namespace and reports its outcome.
func runInNetns(t *testing.T) {
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("network namespaces are needed in CI: "+format, args...)
		}
		t.Skipf("skipped: cannot make a network namespace here: "+format, args...)
	}
	if os.Geteuid() != 0 {
		unavailable("not root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		unavailable("no unshare(1): %v", err)
	}
	if out, err := exec.Command(unshare, "-n", "true").CombinedOutput(); err != nil {
		unavailable("unshare -n: %v: %s", err, out)
	}
	if _, err := os.Stat(ipCommand); err != nil {
		unavailable("no %s (iproute2): %v", ipCommand, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, unshare, "-n", "--", os.Args[0],
		"-test.run=^TestOneAddressOneKeyInANetworkNamespace$", "-test.count=1", "-test.v", "-test.timeout=4m")
	cmd.Env = append(os.Environ(), netnsChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in the namespace:\n%s", out)
	if err != nil {
		t.Fatalf("the test in the network namespace failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestOneAddressOneKeyInANetworkNamespace") {
		t.Fatal("the test in the network namespace did not pass")
	}
}

const ipCommand = "/usr/sbin/ip"

// netnsChild is the test proper, inside the namespace.
func netnsChild(t *testing.T) {
	const (
		interval  = time.Second
		tolerance = 2 * time.Millisecond // kernel stamp against the limiter's clock
	)
	// A fresh namespace has only lo: nothing the test does can leave the machine.
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Name != "lo" {
			t.Fatalf("the namespace has interface %q besides lo: refusing to run", i.Name)
		}
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", netnsAddr + "/32", "dev", "lo"}} {
		if out, err := exec.Command(ipCommand, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}

	aSeen := make(chan string, 64)
	origin, err := origintest.NewAt(netnsAddr+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/a") {
			aSeen <- r.URL.Path
		}
		origintest.Page(w, r)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer origin.Close()

	s := startTestService(t, "--default-min-interval-ms", "1000", "--request-timeout-ms", "20000",
		"--render-concurrency", "1", "--max-concurrent-count", "16")
	client := &http.Client{Timeout: 60 * time.Second}
	post := func(path, body string) (int, map[string]any) {
		resp, err := client.Post(s.base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatalf("POST %s: answer is not JSON: %v", path, err)
		}
		return resp.StatusCode, m
	}

	// B and C: each entry is sent every spelling in turn, as fast as it answers, until it
	// has been let through once (a refusal on the way is the same key, held).
	entries := []struct{ name, path, body string }{
		{"C probe", "/v1/probe", `{"url":"http://%s/c%d","min_interval_ms":1000,"should_render":false}`},
		{"B fetch", "/v1/render", `{"url":"http://%s/b%d","min_interval_ms":1000,"should_render":false}`},
		{"B render", "/v1/render", `{"url":"http://%s/r%d","min_interval_ms":1000,"should_render":true}`},
	}
	counts := map[string]int{}
	for _, e := range entries {
		deadline := time.Now().Add(30 * time.Second)
		admitted := false
		for i := 0; !admitted && time.Now().Before(deadline); i++ {
			sp := netnsSpellings[i%len(netnsSpellings)]
			code, m := post(e.path, fmt.Sprintf(e.body, sp, i))
			switch {
			case code == http.StatusOK && m["has_reached_origin"] == true:
				if m["http_status"] != float64(200) || m["domain"] != netnsAddr {
					t.Errorf("%s %s: %v, want 200 from domain %s", e.name, sp, m, netnsAddr)
				}
				admitted = true
				counts[e.name+" reached"]++
			case code == http.StatusTooManyRequests || m["fail_reason"] == "self_rate_limited":
				counts[e.name+" self_rate_limited"]++
			default:
				t.Fatalf("%s %s: %d %v", e.name, sp, code, m)
			}
		}
		if !admitted {
			t.Fatalf("%s was never let through in 30 s", e.name)
		}
	}

	// A: every spelling as a task of the local queue (its own path: the queue keeps one
	// task per canonical URL), run one interval apart.
	var tasks []string
	for i, sp := range netnsSpellings {
		tasks = append(tasks, fmt.Sprintf(`{"url":"http://%s/a%d","min_interval_ms":1000}`, sp, i))
	}
	if code, m := post("/v1/tasks", `{"tasks":[`+strings.Join(tasks, ",")+`]}`); code != http.StatusCreated {
		t.Fatalf("POST /v1/tasks: %d %v", code, m)
	}
	wait := time.NewTimer(time.Duration(len(tasks)+30) * interval)
	defer wait.Stop()
	var seen []string
	for len(seen) < len(tasks) {
		select {
		case p := <-aSeen:
			seen = append(seen, p)
		case <-wait.C:
			t.Fatalf("the origin saw %d of %d entry A tasks: %v", len(seen), len(tasks), seen)
		}
	}

	code, list := s.get(t, "/v1/domains")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/domains: %d %v", code, list)
	}
	var domains []string
	ds, _ := list["domains"].([]any)
	for _, d := range ds {
		m, _ := d.(map[string]any)
		domains = append(domains, fmt.Sprint(m["domain"]))
		if m["last_request_at"] == nil || m["last_request_at"] == "" {
			t.Errorf("domain %v: no last_request_at", m["domain"])
		}
	}
	if !slices.Equal(domains, []string{netnsAddr}) {
		t.Errorf("the limiter holds %q, want the one domain %s", domains, netnsAddr)
	}

	s.stop(t)
	arrivals := origin.Arrivals()
	sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].At.Before(arrivals[j].At) })
	if n := origin.UnstampedCount(); n > 0 {
		t.Errorf("%d arrivals had no kernel receive time", n)
	}
	minGap := time.Duration(-1)
	for i := 1; i < len(arrivals); i++ {
		gap := arrivals[i].At.Sub(arrivals[i-1].At)
		if minGap < 0 || gap < minGap {
			minGap = gap
		}
		if gap < interval-tolerance {
			t.Errorf("arrivals %s %s and %s %s are %v apart, under the interval %v", arrivals[i-1].Host, arrivals[i-1].Path,
				arrivals[i].Host, arrivals[i].Path, gap, interval)
		}
	}
	hosts := map[string]int{}
	for _, a := range arrivals {
		hosts[a.Host]++
	}
	t.Logf("answers: %v; %d arrivals, Host headers %v, smallest gap %v", counts, len(arrivals), hosts, minGap)
	if len(arrivals) < len(tasks)+len(entries) {
		t.Errorf("%d arrivals, want at least %d (every task and each entry once)", len(arrivals), len(tasks)+len(entries))
	}
	if len(hosts) != 1 || hosts[netnsAddr] == 0 {
		t.Errorf("Host headers %v, want only %s", hosts, netnsAddr)
	}
}

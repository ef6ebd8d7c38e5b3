package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"downloader/origintest"
)

// TestTasksRefuseWhatEntriesRefuse: POST /v1/tasks refuses a URL that names a forbidden
// address directly, in any spelling, with the 400 entries B and C give (the SSRF guard's
// literal-address check, shared through the local queue's CheckTask), naming the task's
// field; nothing of the submission is queued. The real program, at the HTTP API.
func TestTasksRefuseWhatEntriesRefuse(t *testing.T) {
	// ok.test goes nowhere reachable: nothing here may be fetched anyway.
	s := startTestService(t, "--connect-to", "ok.test::127.0.0.1:1")
	for _, u := range []string{
		"http://127.0.0.1/",
		"http://localhost:8080/",
		"http://sub.localhost/",
		"http://[::1]/",
		"http://[::ffff:127.0.0.1]/",
		"http://0x7f.0.0.1/",
		"http://0177.0.0.1/",
		"http://2130706433/",
		"http://127.1/",
		"https://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		"http://192.168.1.1:8080/",
		"http://0.0.0.0/",
		"http://①②⑦.⓪.⓪.①/",
		"http://127.0.0.1./",
	} {
		t.Run(u, func(t *testing.T) {
			target, _ := json.Marshal(u)
			var entryErr any
			for _, path := range []string{"/v1/render", "/v1/probe"} {
				resp, m := s.post(t, path, `{"url":`+string(target)+`,"should_render":false}`)
				if resp.StatusCode != 400 || m["field"] != "url" {
					t.Fatalf("%s: %d %v, want 400 naming url", path, resp.StatusCode, m)
				}
				entryErr = m["error"]
			}
			resp, m := s.post(t, "/v1/tasks", `{"tasks":[{"url":"http://ok.test/"},{"url":`+string(target)+`}]}`)
			if resp.StatusCode != 400 || m["field"] != "tasks[1].url" {
				t.Fatalf("/v1/tasks: %d %v, want 400 naming tasks[1].url", resp.StatusCode, m)
			}
			if want := "tasks[1].url: " + entryErr.(string); m["error"] != want {
				t.Errorf("/v1/tasks error %q, want B's and C's %q", m["error"], want)
			}
			if strings.Join(mapKeys(m), ",") != "error,field" {
				t.Errorf("/v1/tasks answer %v, want {error, field}", m)
			}
		})
	}
	if code, m := s.get(t, "/v1/tasks"); code != 200 || len(m["tasks"].([]any)) != 0 {
		t.Errorf("GET /v1/tasks: %d %v, want nothing queued", code, m)
	}
}

func mapKeys(m map[string]any) []string {
	var ks []string
	for _, k := range []string{"error", "field"} {
		if _, ok := m[k]; ok {
			ks = append(ks, k)
		}
	}
	if len(ks) != len(m) {
		ks = append(ks, "more")
	}
	return ks
}

// TestCrawlRefusesWhatEntriesRefuse: a crawl's task file is read as POST /v1/tasks reads
// a submission: a line that names a forbidden address directly is an invalid line, named,
// and never fetched.
func TestCrawlRefusesWhatEntriesRefuse(t *testing.T) {
	var seen atomic.Int64
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		origintest.Page(w, r)
	}))
	defer origin.Close()
	var stdout, stderr syncBuffer
	file := writeFile(t, "http://127.0.0.1:1/", `{"url":"http://0x7f.1/"}`, "http://[::1]/")
	err := run(context.Background(), append([]string{"crawl", "--data-dir", t.TempDir(), "--connect-to", "ok.test::" + origin.Addr(),
		"--renderer-endpoint", "ws://127.0.0.1:1/devtools/browser", "--shutdown-grace-seconds", "5"}, file), noEnv, &stdout, &stderr)
	if err == nil {
		t.Errorf("a crawl of invalid lines only succeeded:\n%s", stdout.String())
	}
	for _, want := range []string{"urls.txt:1: url:", "urls.txt:2: url:", "urls.txt:3: url:"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if !strings.Contains(squash(stdout.String()), "invalid lines 3") {
		t.Errorf("summary lacks the 3 invalid lines:\n%s", stdout.String())
	}
	if n := seen.Load(); n != 0 {
		t.Errorf("the origin saw %d requests, want none", n)
	}
}

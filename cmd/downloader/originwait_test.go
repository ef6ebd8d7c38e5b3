package main

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"downloader/internal/testkit"
	"downloader/origintest"
)

// TestOriginWaitHoldsEveryEntry is SPEC §2's origin's own wait through the whole program,
// at a real origin with kernel-stamped arrivals: a 429 with Retry-After (plain fetch) and
// a 503 with an HTTP-date Retry-After (a render's main document) hold their domains on
// every entry. Meanwhile B answers 429 with the remaining wait, C answers
// self_rate_limited with health_signal.retry_after_seconds, the domain view shows
// hold_until_at, and entry A's task waits: no request reaches the origin before the
// moment it asked for.
func TestOriginWaitHoldsEveryEntry(t *testing.T) {
	const waitSeconds = 2
	var mu sync.Mutex
	askedUntil := map[string]time.Time{} // host → the earliest moment it asked to be called again
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/busy" {
			origintest.Page(w, r)
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		switch r.Host {
		case "seconds.test":
			askedUntil[r.Host] = now.Add(waitSeconds * time.Second)
			w.Header().Set("Retry-After", strconv.Itoa(waitSeconds))
			http.Error(w, "slow down", http.StatusTooManyRequests)
		default: // date.test: an HTTP-date, whole seconds, at least 2 s ahead
			until := now.Add(3 * time.Second).Truncate(time.Second)
			askedUntil[r.Host] = until
			w.Header().Set("Retry-After", until.UTC().Format(http.TimeFormat))
			http.Error(w, "down for a moment", http.StatusServiceUnavailable)
		}
	}))
	defer origin.Close()
	s := startTestService(t, "--connect-to", origin.ConnectTo(), "--default-min-interval-ms", "0", "--render-concurrency", "1")

	asked := map[string]time.Time{}
	for _, ask := range []struct{ host, entry, body string }{
		// The origins ask: a probe (plain fetch) and a render (its main document).
		{"seconds.test", "/v1/probe", `{"url":"http://seconds.test/busy","min_interval_ms":0,"should_render":false}`},
		{"date.test", "/v1/render", `{"url":"http://date.test/busy","min_interval_ms":0,"should_render":true}`},
	} {
		host := ask.host
		resp, m := s.post(t, ask.entry, ask.body)
		if m["fail_reason"] == "renderer_unavailable" {
			t.Logf("no renderer here: the render's case is left out (%v)", m)
			continue
		}
		if resp.StatusCode != http.StatusOK || m["has_reached_origin"] != true || retryAfterOf(m) < 1 ||
			(m["http_status"] != float64(429) && m["http_status"] != float64(503)) {
			t.Fatalf("%s: the answer that asks for a wait: %d %v", host, resp.StatusCode, m)
		}
		mu.Lock()
		asked[host] = askedUntil[host]
		mu.Unlock()

		// B: 429, the remaining wait in the body and the header.
		resp, m = s.post(t, "/v1/render", fmt.Sprintf(`{"url":"http://%s/b","min_interval_ms":0,"should_render":false}`, host))
		if resp.StatusCode != http.StatusTooManyRequests || m["fail_reason"] != "self_rate_limited" {
			t.Errorf("%s: B during the wait: %d %v, want 429 self_rate_limited", host, resp.StatusCode, m)
		}
		n, _ := m["retry_after_seconds"].(float64)
		if remaining := time.Until(asked[host]); n < 1 || n > float64(int64(remaining/time.Second)+2) {
			t.Errorf("%s: B retry_after_seconds %v, want the remaining wait (%v)", host, m["retry_after_seconds"], remaining)
		}
		if h := resp.Header.Get("Retry-After"); h != strconv.Itoa(int(n)) {
			t.Errorf("%s: B Retry-After header %q, body %v", host, h, n)
		}
		// C: self_rate_limited, not reached, no status, the wait in health_signal.
		resp, m = s.post(t, "/v1/probe", fmt.Sprintf(`{"url":"http://%s/c","min_interval_ms":0,"should_render":false}`, host))
		if resp.StatusCode != http.StatusOK || m["fail_reason"] != "self_rate_limited" || m["has_reached_origin"] != false || m["http_status"] != nil {
			t.Errorf("%s: C during the wait: %d %v", host, resp.StatusCode, m)
		}
		if ra := retryAfterOf(m); ra < 1 || float64(ra) > time.Until(asked[host]).Seconds()+2 {
			t.Errorf("%s: C health_signal.retry_after_seconds %d, want the remaining wait", host, ra)
		}
		// The domain view shows the hold.
		if code, m := s.get(t, "/v1/domains/"+host); code != http.StatusOK || m["hold_until_at"] == nil {
			t.Errorf("%s: GET /v1/domains: %d %v, want hold_until_at", host, code, m)
		} else if at, err := time.Parse(time.RFC3339Nano, m["hold_until_at"].(string)); err != nil || at.Before(asked[host]) {
			t.Errorf("%s: hold_until_at %v (%v), want no earlier than %v", host, m["hold_until_at"], err, asked[host])
		}
		// A: the task (and the crawl's robots.txt before it) waits for the end of the
		// wait, then runs.
		if resp, m := s.post(t, "/v1/tasks", fmt.Sprintf(`{"tasks":[{"url":"http://%s/a","min_interval_ms":0}]}`, host)); resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /v1/tasks: %d %v", resp.StatusCode, m)
		}
	}

	testkit.WaitFor(t, 30*time.Second, "every task at the origin", func() bool {
		seen := 0
		for _, a := range origin.Arrivals() {
			if a.Path == "/a" {
				seen++
			}
		}
		return seen == len(asked)
	})
	if n := origin.UnstampedCount(); n > 0 {
		t.Errorf("%d requests had no kernel receive time", n)
	}
	// At the origin: after each answer that asked for a wait, nothing before its end, and
	// the task's request after it.
	for _, a := range origin.Arrivals() {
		until, ok := asked[a.Host]
		if !ok || a.Path == "/busy" {
			continue
		}
		if a.At.Before(until) {
			t.Errorf("%s%s arrived at %v, %v before the moment the origin asked for", a.Host, a.Path, a.At, until.Sub(a.At))
		}
		if a.Path != "/a" && a.Path != "/robots.txt" {
			t.Errorf("%s%s reached the origin: B and C must have been refused", a.Host, a.Path)
		}
	}
}

// retryAfterOf is health_signal.retry_after_seconds of an answer, -1 when absent.
func retryAfterOf(m map[string]any) int {
	hs, _ := m["health_signal"].(map[string]any)
	n, ok := hs["retry_after_seconds"].(float64)
	if !ok {
		return -1
	}
	return int(n)
}

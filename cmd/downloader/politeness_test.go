package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"downloader/origintest"
)

// TestPolitenessAtTheOrigin is the limiter's integration test (SPEC §2): concurrent B and C traffic over
// 200 domains with mixed intervals, some of them redirecting to other hosts, through the
// real server and the real fetcher, checked where it matters: at the origin.
func TestPolitenessAtTheOrigin(t *testing.T) {
	t.Parallel() // owns its service, origin and data dir (longTests in main_test.go)
	const (
		domainCount     = 200
		defaultInterval = 150 * time.Millisecond
		workers         = 24
		requestCount    = 2400
		tolerance       = 2 * time.Millisecond
	)
	intervals := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond}
	intervalOf := map[string]time.Duration{}
	for i := range domainCount {
		intervalOf[fmt.Sprintf("d%03d.test", i)] = intervals[i%len(intervals)]
	}
	// Every 10th domain answers /redir with a redirect to a landing host only reached that
	// way, and every 7th to another path on its own host.
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.Split(r.Host, ":")[0]
		switch r.URL.Path {
		case "/redir":
			var n int
			fmt.Sscanf(host, "d%03d.test", &n)
			if n%10 == 0 {
				http.Redirect(w, r, fmt.Sprintf("http://landing%d.test/landed", n%3), http.StatusFound)
				return
			}
			http.Redirect(w, r, "/landed", http.StatusMovedPermanently)
			return
		}
		origintest.Page(w, r)
	}))
	defer origin.Close()

	s := startTestService(t, "--connect-to", origin.ConnectTo(),
		"--default-min-interval-ms", fmt.Sprint(defaultInterval.Milliseconds()),
		"--max-concurrent-count", "32", "--local-queue-length", "64", "--request-timeout-ms", "10000")

	type answer struct {
		path   string
		domain string
		code   int
		header http.Header
		body   map[string]any
	}
	answers := make(chan answer, requestCount)
	var wg sync.WaitGroup
	next := make(chan int, requestCount)
	for i := range requestCount {
		next <- i
	}
	close(next)
	client := &http.Client{Timeout: 30 * time.Second}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range next {
				n := rng.IntN(domainCount)
				domain := fmt.Sprintf("d%03d.test", n)
				path := "/page"
				if n%7 == 0 || n%10 == 0 {
					path = "/redir"
				}
				iv := intervalOf[domain].Milliseconds()
				entry, body := "/v1/probe", fmt.Sprintf(`{"url":"http://%s%s","min_interval_ms":%d,"should_render":false}`, domain, path, iv)
				if rng.IntN(2) == 0 {
					entry, body = "/v1/render", fmt.Sprintf(`{"url":"http://%s%s","domain":"%s","min_interval_ms":%d,"should_render":false}`, domain, path, domain, iv)
				}
				resp, err := client.Post(s.base+entry, "application/json", strings.NewReader(body))
				if err != nil {
					t.Errorf("POST %s: %v", entry, err)
					return
				}
				var m map[string]any
				err = json.NewDecoder(resp.Body).Decode(&m)
				resp.Body.Close()
				if err != nil {
					t.Errorf("POST %s: not JSON: %v", entry, err)
					return
				}
				answers <- answer{path: entry, domain: domain, code: resp.StatusCode, header: resp.Header, body: m}
			}
		}()
	}
	wg.Wait()
	close(answers)

	counts := map[string]int{}
	for a := range answers {
		switch {
		case a.path == "/v1/render" && a.code == http.StatusTooManyRequests:
			counts["render 429"]++
			n, _ := a.body["retry_after_seconds"].(float64)
			if n < 1 || a.header.Get("Retry-After") != fmt.Sprint(int(n)) {
				t.Errorf("429 shape: Retry-After %q, body %v", a.header.Get("Retry-After"), a.body)
			}
		case a.code != http.StatusOK:
			t.Errorf("%s %s: status %d %v", a.path, a.domain, a.code, a.body)
		case a.body["has_reached_origin"] == false:
			counts[a.path+" not reached"]++
			if a.path != "/v1/probe" {
				t.Errorf("render not reached without 429: %v", a.body)
			}
			if fr := a.body["fail_reason"]; fr != "self_rate_limited" && fr != "local_queue_full" {
				t.Errorf("probe not reached: fail_reason %v", fr)
			}
			if a.body["http_status"] != nil {
				t.Errorf("probe not reached has http_status %v", a.body["http_status"])
			}
		default:
			counts[a.path+" ok"]++
			if a.body["http_status"] != float64(200) || a.body["fail_reason"] != nil || a.body["domain"] != a.domain {
				t.Errorf("%s %s: %v", a.path, a.domain, a.body)
			}
		}
	}
	t.Logf("answers: %v", counts)
	if n := origin.UnstampedCount(); n > 0 {
		t.Errorf("%d arrivals had no kernel receive time: the origin's measurement is not exact", n)
	}
	if counts["/v1/probe ok"] == 0 || counts["/v1/render ok"] == 0 || counts["render 429"] == 0 || counts["/v1/probe not reached"] == 0 {
		t.Errorf("the load did not exercise every path: %v", counts)
	}

	// At the origin: no two requests to one host closer than its interval.
	check := func(host string) (time.Duration, bool) {
		if iv, ok := intervalOf[host]; ok {
			return iv, true
		}
		return defaultInterval, true // landing hosts: reached only through redirects
	}
	if v := origin.Violations(check, tolerance); len(v) > 0 {
		t.Errorf("%d politeness violations at the origin, e.g. %v", len(v), v[:min(5, len(v))])
		var prev time.Time
		for _, a := range origin.Arrivals() {
			if a.Host == v[0].Host {
				t.Logf("%s %s %v (+%v)", a.Host, a.Path, a.At.Format("15:04:05.000000"), a.At.Sub(prev))
				prev = a.At
			}
		}
	}
	// Nothing reached a host without that host's admission, redirect hops included.
	arrivals := origin.CountByHost()
	if len(arrivals) < domainCount/2 {
		t.Errorf("only %d hosts reached", len(arrivals))
	}
	for host, n := range arrivals {
		code, st := s.get(t, "/v1/domains/"+host)
		if code != 200 {
			t.Errorf("%s was reached %d times but has no runtime state", host, n)
			continue
		}
		if admitted := st["request_24h_count"].(float64); int(admitted) < n {
			t.Errorf("%s: %d arrivals but only %v admissions", host, n, admitted)
		}
	}
	for i := range 3 {
		if arrivals[fmt.Sprintf("landing%d.test", i)] == 0 {
			t.Errorf("landing%d.test never reached: redirects not followed", i)
		}
	}
}

// TestWireLogRows: the crawl's politeness rows are the smallest gap between the moments
// the limiter told, whatever order they were told in, with the latest interval.
func TestWireLogRows(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var l wireLog
	l.observe("a.test", 100*time.Millisecond, at(0))
	l.observe("a.test", 100*time.Millisecond, at(500))
	l.observe("a.test", 200*time.Millisecond, at(120)) // told late: between the two
	l.observe("b.test", time.Second, at(50))
	rows := l.rows()
	sort.Slice(rows, func(i, j int) bool { return rows[i].domain < rows[j].domain })
	want := []domainGap{
		{domain: "a.test", requestCount: 3, minGap: 120 * time.Millisecond, minInterval: 200 * time.Millisecond},
		{domain: "b.test", requestCount: 1, minInterval: time.Second},
	}
	if !slices.Equal(rows, want) {
		t.Errorf("rows = %+v, want %+v", rows, want)
	}
	var out strings.Builder
	printPoliteness(&out, rows)
	if s := squash(out.String()); !strings.Contains(s, "a.test 3 120.0 ms 200") || !strings.Contains(s, "b.test 1 — 1000") ||
		!strings.Contains(s, "domains with a gap below their interval: 1 of 2") {
		t.Errorf("table:\n%s", out.String())
	}
}

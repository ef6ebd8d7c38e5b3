package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"downloader/internal/testkit"
	"downloader/origintest"
)

var updateDocs = flag.Bool("update-docs", false, "write the console screenshots to docs/ (otherwise to a temporary directory)")

const chromiumPath = "/usr/lib/chromium/chromium-headless-shell"

// TestConsoleInChromium is the console's end-to-end test (SPEC §6): the real service on port 0 with a
// temp data dir, B and C traffic against a local origin, then each console page in
// headless Chromium: the numbers it shows equal the JSON APIs, max_concurrent_count
// changed through the form takes effect at once, and a probe action runs entry C without
// lowering the domain's interval; each page reads at a glance at 1280 px (checkGlance:
// English notes, charts, no overflow). It saves a PNG of each page.
func TestConsoleInChromium(t *testing.T) {
	t.Parallel() // owns its service, origin and data dir (longTests in main_test.go)
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no headless Chromium at %s (scripts/test.sh installs it)", chromiumPath)
	}
	// The origin: /bad answers 502; /slow holds the request until released.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseAll()
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bad":
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		case "/slow":
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		origintest.Page(w, r)
	}))
	defer origin.Close()

	// The domains asked twice below are asked again at once, with intervals (1 s, 2 s) far
	// longer than the time between the two requests even on a loaded machine (a plain
	// fetch of a local page and one more POST): the second is refused however slow the
	// first was.
	s := startTestService(t, "--connect-to", origin.ConnectTo(), "--default-min-interval-ms", "2000",
		"--max-concurrent-count", "8", "--render-concurrency", "1", "--request-timeout-ms", "20000")
	// A fresh data dir has lost nothing (SPEC §2, loss and rebuild): every first request
	// below is admitted at once.
	browser := newBrowser(t)

	// Traffic through B and C.
	steps := []struct {
		path, body string
		code       int
		reason     any // fail_reason
	}{
		{"/v1/probe", `{"url":"http://news.example.tw/","should_render":false,"min_interval_ms":2000}`, 200, nil},
		{"/v1/probe", `{"url":"http://news.example.tw/","should_render":false,"min_interval_ms":2000}`, 200, "self_rate_limited"},
		{"/v1/probe", `{"url":"http://m.example.hk/bad","should_render":false,"min_interval_ms":300}`, 200, "http_status_error"}, // the origin answers 502
		{"/v1/probe", `{"url":"http://shop.example.jp/","should_render":true,"min_interval_ms":400}`, 200, nil},                  // a real render
		{"/v1/probe", `{"url":"http://docs.example.cn/","should_render":false,"min_interval_ms":1000}`, 200, nil},
		{"/v1/render", `{"url":"http://docs.example.cn/page","should_render":false,"min_interval_ms":1000}`, 429, "self_rate_limited"}, // at once after the probe
		{"/v1/render", `{"url":"http://blog.example.com/","should_render":false}`, 200, nil},                                           // the global default interval
		{"/v1/render", `{"url":"http://blog.example.com/again","should_render":false}`, 429, "self_rate_limited"},
	}
	for _, st := range steps {
		resp, m := s.post(t, st.path, st.body)
		if resp.StatusCode != st.code || m["fail_reason"] != st.reason {
			t.Fatalf("POST %s %s: %d %v, want %d and fail_reason %v", st.path, st.body, resp.StatusCode, m, st.code, st.reason)
		}
	}
	checkLogLines(t, s.stderr.String())

	shots := t.TempDir()
	if *updateDocs {
		shots = filepath.Join("..", "..", "docs")
	}

	t.Run("runtime page equals the JSON", func(t *testing.T) {
		comparePage(t, s, browser, "/", func(m *mismatches, jsonAt func(string) map[string]any, page pageFields) {
			rt := jsonAt("/v1/console/runtime")
			for _, k := range []string{"domain_count", "in_flight_count", "max_concurrent_count", "request_24h_count", "over_limit_24h_count"} {
				m.expect(page, "", k, shownNum(rt[k]))
			}
			m.expect(page, "", "over_limit_ratio", fixed2(rt["over_limit_ratio"].(float64)*100)+"%")
			for _, e := range rt["entries"].([]any) {
				e := e.(map[string]any)
				for _, k := range []string{"over_limit_24h_count", "local_queue_full_24h_count", "request_24h_count"} {
					m.expect(page, "entry:"+e["entry"].(string), k, shownNum(e[k]))
				}
			}
			list := jsonAt("/v1/domains")
			m.expect(page, "", "match_count", shownNum(list["match_count"]))
			m.expect(page, "", "table_domain_count", shownNum(list["domain_count"]))
			domains := list["domains"].([]any)
			if len(domains) != 5 {
				m.errorf("%d domains, want 5", len(domains))
			}
			for _, d := range domains {
				d := d.(map[string]any)
				row := "domain:" + d["domain"].(string)
				for _, k := range []string{"domain", "interval_source", "state"} {
					m.expect(page, row, k, d[k].(string))
				}
				m.expect(page, row, "last_request_at", shownTime(d["last_request_at"]))
				for _, k := range []string{"min_interval_ms", "in_flight_count", "request_24h_count"} {
					m.expect(page, row, k, shownNum(d[k]))
				}
			}
			m.expect(page, "domain:news.example.tw", "state", "over_limit_c")
			m.expect(page, "domain:blog.example.com", "interval_source", "default")
		})
		screenshot(t, browser, s.base+"/", filepath.Join(shots, "console-runtime.png"))
	})

	t.Run("probes page equals the JSON", func(t *testing.T) {
		comparePage(t, s, browser, "/probes", func(m *mismatches, jsonAt func(string) map[string]any, page pageFields) {
			p := jsonAt("/v1/console/probes")
			for _, k := range []string{"probe_24h_count", "reached_origin_24h_count", "not_reached_origin_24h_count", "render_probe_24h_count"} {
				m.expect(page, "", k, shownNum(p[k]))
			}
			if p["probe_24h_count"] != 5.0 || p["render_probe_24h_count"] != 1.0 {
				m.errorf("probes %v, render probes %v: want 5 and 1", p["probe_24h_count"], p["render_probe_24h_count"])
			}
			m.expect(page, "cause:reached_failed", "reached_failed_24h_count", shownNum(p["reached_failed_24h_count"]))
			for _, c := range p["causes"].([]any) {
				c := c.(map[string]any)
				m.expect(page, "cause:"+c["fail_reason"].(string), "probe_24h_count", shownNum(c["probe_24h_count"]))
			}
			samples := p["samples"].([]any)
			if len(samples) != 5 {
				m.errorf("%d samples, want 5", len(samples))
			}
			for i, x := range samples {
				x := x.(map[string]any)
				row := fmt.Sprintf("sample:%d", i)
				for _, k := range []string{"domain", "url"} {
					m.expect(page, row, k, x[k].(string))
				}
				m.expect(page, row, "probed_at", shownTime(x["probed_at"]))
				for _, k := range []string{"should_render", "has_reached_origin"} {
					m.expect(page, row, k, strconv.FormatBool(x[k].(bool)))
				}
				for _, k := range []string{"http_status", "raw_text_length", "text_length"} {
					m.expect(page, row, k, shownNum(x[k]))
				}
				fr := "null"
				if x["fail_reason"] != nil {
					fr = x["fail_reason"].(string)
				}
				m.expect(page, row, "fail_reason", fr)
			}
		})
		screenshot(t, browser, s.base+"/probes", filepath.Join(shots, "console-probes.png"))
	})

	t.Run("stats page equals the JSON", func(t *testing.T) {
		comparePage(t, s, browser, "/stats", func(m *mismatches, jsonAt func(string) map[string]any, page pageFields) {
			st := jsonAt("/v1/console/stats")
			for _, k := range []string{"politeness_ceiling_per_second", "capacity_ceiling_per_second"} {
				m.expect(page, "", k, shownFloat(st[k], 2))
			}
			// While the process is younger than the window, the achieved rate and its
			// span follow its age (observe.Recent): the page, read first, may be up to
			// two seconds younger than the JSON.
			span, _ := st["span_seconds"].(float64)
			fin, _ := st["finished_count"].(float64)
			var spans []string
			for d := 0.0; d <= 2 && span-d >= 1; d++ {
				spans = append(spans, shownNum(span-d))
			}
			lo, hi := fin/span-0.01, fin/max(span-3, 1)+0.01 // the rate over an uptime a few seconds shorter
			if span >= 300 {
				spans = []string{shownNum(span)}
				lo, hi = fin/span-0.01, fin/span+0.01
			}
			m.expectOneOf(page, "", "span_seconds", spans)
			if got, err := strconv.ParseFloat(page[""]["achieved_rate_per_second"], 64); err != nil || got < lo || got > hi {
				m.errorf("achieved_rate_per_second: page shows %q, want %.2f..%.2f (the JSON says %v)", page[""]["achieved_rate_per_second"], lo, hi, st["achieved_rate_per_second"])
			}
			m.expect(page, "", "mean_service_ms", shownFloat(st["mean_service_ms"], 1))
			for _, k := range []string{"active_domain_count", "max_concurrent_count", "finished_count",
				"global_in_flight_count", "queued_count", "local_queue_length", "domain_count", "active_span_seconds"} {
				m.expect(page, "", k, shownNum(st[k]))
			}
			b := "null"
			if st["binding_ceiling"] != nil {
				b = st["binding_ceiling"].(string)
			}
			m.expect(page, "", "binding_ceiling", b)
			r := st["renderer"].(map[string]any)
			for k, field := range map[string]string{"slot_count": "slot_count", "busy_count": "busy_count",
				"queued_count": "renderer_queued_count", "restart_count": "restart_count", "rendered_count": "rendered_count",
				"warm_tab_count": "warm_tab_count", "effective_slot_count": "effective_slot_count"} {
				m.expect(page, "", field, shownNum(r[k]))
			}
			m.expect(page, "", "is_browser_up", strconv.FormatBool(r["is_browser_up"].(bool)))
			m.expect(page, "", "is_adaptive", strconv.FormatBool(r["is_adaptive"].(bool)))
			if st["active_domain_count"] != 5.0 || st["politeness_ceiling_per_second"] == nil {
				m.errorf("active %v, politeness %v", st["active_domain_count"], st["politeness_ceiling_per_second"])
			}
		})
		screenshot(t, browser, s.base+"/stats", filepath.Join(shots, "console-stats.png"))
	})

	t.Run("pages read at a glance at 1280 px", func(t *testing.T) {
		for path, charts := range map[string]int{"/": 2, "/probes": 1, "/stats": 1} {
			checkGlance(t, browser, s.base, path, charts)
		}
	})

	t.Run("max_concurrent_count through the form", func(t *testing.T) {
		ctx := browser.tab(t)
		err := chromedp.Do(ctx,
			chromedp.Navigate(s.base+"/"),
			chromedp.WaitVisible(chromedp.CSS("#settings-form")),
			chromedp.SetValue(chromedp.CSS("#new-max-concurrent-count"), "1"),
			chromedp.SetValue(chromedp.CSS("#actor"), "e2e"),
			chromedp.Click(chromedp.CSS("#settings-submit")),
			chromedp.WaitVisible(chromedp.CSS("#settings-confirm")),
		)
		if err != nil {
			t.Fatal(err)
		}
		if code, m := s.get(t, "/v1/settings"); code != 200 || m["max_concurrent_count"] != 8.0 {
			t.Fatalf("changed before the confirmation: %v", m)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#settings-yes")),
			chromedp.Poll[chromedp.Void](`document.getElementById("settings-result").textContent.includes("✓")`, chromedp.WithPollingTimeout(10*time.Second)),
		); err != nil {
			t.Fatal(err)
		}
		shown, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#max-concurrent-count")))
		if err != nil || shown != "1" {
			t.Errorf("the page shows %q (%v), want 1", shown, err)
		}
		if _, m := s.get(t, "/v1/settings"); m["max_concurrent_count"] != 1.0 {
			t.Fatalf("settings after the form: %v", m)
		}
		if !strings.Contains(scrape(t, s), "\ndownloader_max_concurrent_count 1\n") {
			t.Error("/metrics does not show the new cap")
		}
		// Who, when, old and new are logged.
		if !hasLogLine(s.stderr.String(), func(m map[string]any) bool {
			return m["msg"] == "settings changed" && strings.HasPrefix(fmt.Sprint(m["actor"]), "e2e@") &&
				m["old_max_concurrent_count"] == 8.0 && m["max_concurrent_count"] == 1.0 && m["changed_at"] != nil
		}) {
			t.Errorf("no settings change logged with actor, old, new and changed_at:\n%s", s.stderr.String())
		}
		// It takes effect at once: one slow request holds the only slot, the next waits.
		done := make(chan int, 2)
		for _, host := range []string{"slow1.example.org", "slow2.example.org"} {
			go func() {
				client := http.Client{Timeout: 30 * time.Second}
				resp, err := client.Post(s.base+"/v1/probe", "application/json",
					strings.NewReader(`{"url":"http://`+host+`/slow","should_render":false}`))
				if err != nil {
					done <- 0
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done <- resp.StatusCode
			}()
		}
		testkit.WaitFor(t, 10*time.Second, "one request in flight and one queued", func() bool {
			_, st := s.get(t, "/v1/console/stats")
			return st["global_in_flight_count"] == 1.0 && st["queued_count"] == 1.0
		})
		releaseAll()
		for range 2 {
			if code := <-done; code != 200 {
				t.Errorf("slow probe: %d", code)
			}
		}
	})

	t.Run("probe action keeps the interval", func(t *testing.T) {
		ctx := browser.tab(t)
		row := `tr[data-row="domain:docs.example.cn"]`
		err := chromedp.Do(ctx,
			chromedp.Navigate(s.base+"/?sort=domain&order=asc"),
			chromedp.Click(chromedp.CSS(row+` button[data-action="probe"]`)),
			chromedp.WaitVisible(chromedp.CSS("#action-panel")),
			chromedp.SetValue(chromedp.CSS("#action-url"), "http://docs.example.cn/"),
			chromedp.Click(chromedp.CSS("#action-run")),
			chromedp.Poll[chromedp.Void](`document.getElementById("action-result").dataset.status === "200"`, chromedp.WithPollingTimeout(15*time.Second)),
		)
		if err != nil {
			t.Fatal(err)
		}
		out, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#action-result")))
		if err != nil {
			t.Fatal(err)
		}
		_, body, _ := strings.Cut(out, "\n")
		var summary map[string]any
		if err := json.Unmarshal([]byte(body), &summary); err != nil {
			t.Fatalf("action result %q: %v", out, err)
		}
		if summary["domain"] != "docs.example.cn" || summary["has_reached_origin"] == nil {
			t.Errorf("probe result %v", summary)
		}
		_, d := s.get(t, "/v1/domains/docs.example.cn")
		if d["min_interval_ms"] != 1000.0 {
			t.Errorf("after the console's probe min_interval_ms = %v, want 1000: no action may lower an interval", d["min_interval_ms"])
		}
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 1000)); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		writePNG(t, filepath.Join(shots, "console-runtime-action.png"), png)
	})
}

// checkLogLines finds one JSON log line per probe and per over-limit event of the traffic,
// with the API's field names.
func checkLogLines(t *testing.T, stderr string) {
	t.Helper()
	probes, overLimit := 0, 0
	for _, line := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "probe":
			probes++
			for _, k := range []string{"domain", "url", "should_render", "http_status", "has_reached_origin", "fail_reason", "min_interval_ms", "interval_source", "entry"} {
				if _, ok := m[k]; !ok {
					t.Errorf("probe line without %s: %s", k, line)
				}
			}
		case "over limit":
			overLimit++
			if m["entry"] != "b" || m["retry_after_seconds"] == nil || m["fail_reason"] == nil {
				t.Errorf("over-limit line %s", line)
			}
		}
	}
	if probes != 5 || overLimit != 2 {
		t.Errorf("%d probe lines and %d over-limit lines, want 5 and 2", probes, overLimit)
	}
}

func hasLogLine(stderr string, f func(map[string]any) bool) bool {
	for _, line := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && f(m) {
			return true
		}
	}
	return false
}

// pageFields is what a page shows: per data-row key ("" outside rows), per data-field, the
// element's data-value if it has one, else its text.
type pageFields map[string]map[string]string

const extractJS = `(() => {
	const out = {};
	document.querySelectorAll("[data-field]").forEach((el) => {
		const row = el.closest("[data-row]");
		const key = row ? row.dataset.row : "";
		out[key] = out[key] || {};
		out[key][el.dataset.field] = el.dataset.value !== undefined ? el.dataset.value : el.textContent.trim().replace(/\s+/g, " ");
	});
	return out;
})()`

// mismatches collects what a page shows differently from the JSON.
type mismatches []string

func (m *mismatches) errorf(format string, args ...any) {
	*m = append(*m, fmt.Sprintf(format, args...))
}

func (m *mismatches) expect(page pageFields, row, field, want string) {
	got, ok := page[row][field]
	switch {
	case !ok:
		m.errorf("row %q shows no %s", row, field)
	case got != want:
		m.errorf("row %q %s: page shows %q, the JSON says %q", row, field, got, want)
	}
}

// expectOneOf is expect for a value that may be any of wants.
func (m *mismatches) expectOneOf(page pageFields, row, field string, wants []string) {
	got, ok := page[row][field]
	switch {
	case !ok:
		m.errorf("row %q shows no %s", row, field)
	case !slices.Contains(wants, got):
		m.errorf("row %q %s: page shows %q, the JSON says one of %q", row, field, got, wants)
	}
}

// comparePage loads path in Chromium, then reads the JSON APIs and checks the page
// against them. A value may change between the two reads (a warm tab comes up in the
// renderer pool), so a mismatch is retried twice with a fresh page and fresh JSON before
// it fails the test.
func comparePage(t *testing.T, s *testService, b *browser, path string, check func(m *mismatches, jsonAt func(string) map[string]any, page pageFields)) {
	t.Helper()
	ctx := b.tab(t)
	var m mismatches
	for attempt := 1; attempt <= 3; attempt++ {
		var page pageFields
		err := chromedp.Do(ctx, chromedp.Navigate(s.base+path), chromedp.WaitVisible(chromedp.CSS("main")))
		if err == nil {
			page, err = chromedp.Run(ctx, chromedp.Evaluate[pageFields](extractJS))
		}
		if err != nil {
			t.Fatalf("load %s: %v", path, err)
		}
		if len(page[""]) == 0 {
			t.Fatalf("%s shows no field", path)
		}
		cache := map[string]map[string]any{}
		jsonAt := func(p string) map[string]any {
			if cache[p] == nil {
				code, v := s.get(t, p)
				if code != 200 {
					t.Fatalf("GET %s: %d", p, code)
				}
				cache[p] = v
			}
			return cache[p]
		}
		m = nil
		check(&m, jsonAt, page)
		if len(m) == 0 {
			return
		}
		t.Logf("%s, attempt %d: %d differences, retrying", path, attempt, len(m))
	}
	t.Errorf("%s differs from the JSON:\n%s", path, strings.Join(m, "\n"))
}

// shownNum is how the console prints a JSON number that is a whole number.
func shownNum(v any) string {
	f, ok := v.(float64)
	if !ok {
		return "null"
	}
	return group(strconv.FormatInt(int64(f), 10))
}

// shownTime is how the console prints an instant: RFC 3339 in whole seconds, UTC.
func shownTime(v any) string {
	s, _ := v.(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "unparsable " + s
	}
	return at.UTC().Format(time.RFC3339)
}

func shownFloat(v any, decimals int) string {
	f, ok := v.(float64)
	if !ok {
		return "—"
	}
	s := strconv.FormatFloat(f, 'f', decimals, 64)
	whole, frac, _ := strings.Cut(s, ".")
	return group(whole) + "." + frac
}

func fixed2(f float64) string { return shownFloat(f, 2) }

func group(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func scrape(t *testing.T, s *testService) string {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// browser is one headless Chromium for the test, with the render package's local flags.
type browser struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true), chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-domain-reliability", true), chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("no-pings", true), chromedp.Flag("dns-prefetch-disable", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true), chromedp.Flag("password-store", "basic"),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,AutofillServerCommunication,CertificateTransparencyComponentUpdater"),
		// The console is on 127.0.0.1, which Chromium never proxies; anything else would go
		// to a proxy that is not there, so nothing leaves the machine.
		chromedp.Flag("proxy-server", "http://127.0.0.1:9"),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// Start the browser. The first Run must not carry a timeout (it would end the
	// browser), so the bound is a timer that cancels the allocator instead.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	limit := time.NewTimer(60 * time.Second)
	defer limit.Stop()
	select {
	case err := <-started:
		if err != nil {
			cancel()
			acancel()
			t.Fatalf("start Chromium: %v", err)
		}
	case <-limit.C:
		cancel()
		acancel()
		<-started
		t.Fatal("Chromium did not start within 60 s")
	}
	b := &browser{ctx: ctx, cancel: func() { cancel(); acancel() }}
	t.Cleanup(b.cancel)
	return b
}

// tab opens a new tab for one subtest, closed at its end, with a bound on everything
// done in it.
func (b *browser) tab(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel() })
	return ctx
}

// screenshot loads url in a 1280-wide tab and saves the whole page as a PNG.
func screenshot(t *testing.T, b *browser, url, path string) {
	t.Helper()
	ctx := b.tab(t)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main"))); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	writePNG(t, path, png)
}

func writePNG(t *testing.T, path string, png []byte) {
	t.Helper()
	if len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Fatalf("%s: not a PNG (%d bytes)", path, len(png))
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s (%d KiB)", path, len(png)/1024)
}

package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/html"

	"downloader"
	"downloader/clock"
	"downloader/clock/clocktest"
	"downloader/engine"
	"downloader/internal/testkit"
	"downloader/limiter"
	"downloader/observe"
	"downloader/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC)

// fetcher answers by host: "bad.test" with a 502, "gone.test" refused, others a page.
type fetcher struct{ clk clock.Clock }

func (f fetcher) FetchWith(ctx context.Context, u *url.URL, adm *limiter.Admission, _ limiter.HopAdmitter, _ downloader.FetchOptions) *downloader.Outcome {
	switch u.Hostname() {
	case "gone.test":
		return downloader.Failed(downloader.FailConnectRefused)
	case "bad.test":
		adm.Wire(f.clk.Now())
		n := 0
		return &downloader.Outcome{HTTPStatus: 502, RawTextLength: &n, FailReason: downloader.FailHTTPStatusError}
	}
	adm.Wire(f.clk.Now())
	n := 180
	return &downloader.Outcome{HTTPStatus: 200, FinalURL: u.String(), RawTextLength: &n, Body: []byte("<p>hi</p>"), Text: "hi"}
}

// testWriter logs through t, so that errors the console logs show in the test output.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

type harness struct {
	clk  *clocktest.Fake
	eng  *engine.Engine
	lim  *limiter.Limiter
	gate *limiter.Gate
	obs  *observe.Observer
	srv  *httptest.Server
}

func newHarness(t *testing.T, renderer func() downloader.RendererStats) *harness {
	t.Helper()
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	clk.Advance(2 * time.Hour)
	obs := observe.New(observe.Config{Clock: clk})
	gate := limiter.NewGate(8, 4)
	eng := engine.New(engine.Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: fetcher{clk},
		Settings: &testkit.SettingsStore{}, Observer: obs, DefaultMinInterval: time.Second})
	con, err := New(Config{Clock: clk, Settings: eng, Limiter: lim, Gate: gate, Observer: obs,
		Domains: observe.NewDomainTable(lim, time.Nanosecond), Renderer: renderer,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{Probe: eng, Render: eng, Settings: eng, Domains: lim, Slots: gate, Clock: clk, Extra: con.Register})
	h := &harness{clk: clk, eng: eng, lim: lim, gate: gate, obs: obs, srv: httptest.NewServer(srv)}
	t.Cleanup(h.srv.Close)
	return h
}

func (h *harness) post(t *testing.T, path, body string) int {
	t.Helper()
	resp, err := h.srv.Client().Post(h.srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func (h *harness) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	resp, err := h.srv.Client().Get(h.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (h *harness) getJSON(t *testing.T, path string, v any) int {
	t.Helper()
	resp, body := h.get(t, path)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s: Content-Type %q", path, ct)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, body)
	}
	return resp.StatusCode
}

// traffic drives B and C through the real server: probes of three hosts, renders (plain),
// and refusals over the limit.
func (h *harness) traffic(t *testing.T) {
	t.Helper()
	steps := []struct {
		path, body string
		want       int
	}{
		{"/v1/probe", `{"url":"http://news.example.tw/","should_render":false,"min_interval_ms":2000}`, 200},
		{"/v1/probe", `{"url":"http://news.example.tw/","should_render":false,"min_interval_ms":2000}`, 200}, // self_rate_limited
		{"/v1/probe", `{"url":"http://bad.test/","should_render":false}`, 200},
		{"/v1/probe", `{"url":"http://gone.test/","should_render":false}`, 200},
		{"/v1/probe", `{"url":"http://shop.example.jp/","should_render":true}`, 200}, // no renderer: renderer_unavailable
		{"/v1/render", `{"url":"http://blog.example.com/a","should_render":false}`, 200},
		{"/v1/render", `{"url":"http://blog.example.com/b","should_render":false}`, 429},
	}
	for _, s := range steps {
		if code := h.post(t, s.path, s.body); code != s.want {
			t.Fatalf("POST %s %s: %d, want %d", s.path, s.body, code, s.want)
		}
		h.clk.Advance(10 * time.Millisecond)
	}
}

// fields extracts what a page shows the way the end-to-end test does in the browser:
// every element with data-field, keyed by its closest data-row ("" outside any row), its
// data-value if it has one, else its text.
func fields(t *testing.T, page string) map[string]map[string]string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	var walk func(n *html.Node, row string)
	walk = func(n *html.Node, row string) {
		if n.Type == html.ElementNode {
			if r, ok := attr(n, "data-row"); ok {
				row = r
			}
			if f, ok := attr(n, "data-field"); ok {
				v, ok := attr(n, "data-value")
				if !ok {
					v = strings.Join(strings.Fields(text(n)), " ")
				}
				if out[row] == nil {
					out[row] = map[string]string{}
				}
				out[row][f] = v
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, row)
		}
	}
	walk(doc, "")
	return out
}

func attr(n *html.Node, name string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val, true
		}
	}
	return "", false
}

func text(n *html.Node) string {
	if n.Type == html.TextNode {
		return n.Data
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		b.WriteString(text(c))
	}
	return b.String()
}

// shown turns a JSON value into what the page shows for it.
func shown(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case float64:
		if x == float64(int64(x)) {
			return group(strconv.FormatInt(int64(x), 10))
		}
		return fixed(x, 2)
	case bool:
		return strconv.FormatBool(x)
	case string:
		return x
	}
	return fmt.Sprint(v)
}

func TestRuntime(t *testing.T) {
	h := newHarness(t, nil)
	h.traffic(t)

	var rt map[string]any
	if code := h.getJSON(t, "/v1/console/runtime", &rt); code != 200 {
		t.Fatalf("status %d", code)
	}
	// 5 probes, 2 renders: 7 requests; 1 C and 1 B refused.
	want := map[string]float64{"domain_count": 5, "in_flight_count": 0, "max_concurrent_count": 8,
		"request_24h_count": 7, "over_limit_24h_count": 2, "default_min_interval_ms": 1000}
	for k, w := range want {
		if rt[k] != w {
			t.Errorf("%s = %v, want %v", k, rt[k], w)
		}
	}
	if r := rt["over_limit_ratio"].(float64); r != 2.0/7 {
		t.Errorf("over_limit_ratio %v", r)
	}

	resp, page := h.get(t, "/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	f := fields(t, page)
	for _, k := range []string{"domain_count", "in_flight_count", "max_concurrent_count", "request_24h_count", "over_limit_24h_count"} {
		if f[""][k] != shown(rt[k]) {
			t.Errorf("page %s = %q, JSON %v", k, f[""][k], rt[k])
		}
	}
	if f[""]["over_limit_ratio"] != fixed(rt["over_limit_ratio"].(float64)*100, 2)+"%" {
		t.Errorf("page ratio %q", f[""]["over_limit_ratio"])
	}
	for _, e := range rt["entries"].([]any) {
		e := e.(map[string]any)
		row := f["entry:"+e["entry"].(string)]
		for _, k := range []string{"over_limit_24h_count", "request_24h_count", "local_queue_full_24h_count"} {
			if row[k] != shown(e[k]) {
				t.Errorf("entry %s %s: page %q, JSON %v", e["entry"], k, row[k], e[k])
			}
		}
	}

	// The per-domain table equals GET /v1/domains with the same query.
	var list observe.DomainPage
	h.getJSON(t, "/v1/domains", &list)
	if len(list.Domains) != 5 || list.DomainCount != 5 {
		t.Fatalf("domains: %+v", list)
	}
	for _, d := range list.Domains {
		row := f["domain:"+d.Domain]
		want := map[string]string{"domain": d.Domain, "min_interval_ms": num(d.MinIntervalMs),
			"interval_source": string(d.IntervalSource), "last_request_at": ts(d.LastRequestAt),
			"in_flight_count": num(d.InFlightCount), "request_24h_count": num(d.Request24hCount), "state": string(d.State)}
		for k, w := range want {
			if row[k] != w {
				t.Errorf("%s %s: page %q, JSON %q", d.Domain, k, row[k], w)
			}
		}
	}
	if st := f["domain:news.example.tw"]["state"]; st != "over_limit_c" {
		t.Errorf("news.example.tw state %q, want over_limit_c", st)
	}
	if src := f["domain:bad.test"]["interval_source"]; src != "default" {
		t.Errorf("bad.test source %q", src)
	}
	// Every action carries the domain's own interval: none lowers it.
	re := regexp.MustCompile(`data-action="(fetch|probe)" data-domain="([^"]+)" data-min-interval-ms="(\d+)"`)
	actions := re.FindAllStringSubmatch(page, -1)
	if len(actions) != 10 {
		t.Errorf("%d actions, want fetch and probe on 5 rows", len(actions))
	}
	for _, a := range actions {
		if num(mustAtoi(t, a[3])) != f["domain:"+a[2]]["min_interval_ms"] {
			t.Errorf("%s action on %s sends %s ms, the row says %s", a[1], a[2], a[3], f["domain:"+a[2]]["min_interval_ms"])
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDomainsAPI(t *testing.T) {
	h := newHarness(t, nil)
	for i := range 30 {
		h.post(t, "/v1/probe", fmt.Sprintf(`{"url":"http://d%02d.test/","should_render":false,"min_interval_ms":%d}`, i, 1000+i))
		h.clk.Advance(time.Millisecond)
	}
	var p observe.DomainPage
	h.getJSON(t, "/v1/domains?limit=7", &p)
	if len(p.Domains) != 7 || p.Domains[0].Domain != "d29.test" || p.NextCursor == nil {
		t.Fatalf("default order is newest first: %v", p.Domains[0].Domain)
	}
	var seen []string
	q := "/v1/domains?sort=min_interval_ms&order=asc&limit=7"
	for pages := 0; ; pages++ {
		var p observe.DomainPage
		if code := h.getJSON(t, q, &p); code != 200 {
			t.Fatalf("%s: %d", q, code)
		}
		for _, d := range p.Domains {
			seen = append(seen, d.Domain)
		}
		if p.NextCursor == nil {
			break
		}
		q = "/v1/domains?sort=min_interval_ms&order=asc&limit=7&cursor=" + url.QueryEscape(*p.NextCursor)
	}
	if len(seen) != 30 || seen[0] != "d00.test" || seen[29] != "d29.test" {
		t.Errorf("paged by interval: %v", seen)
	}
	var s observe.DomainPage
	h.getJSON(t, "/v1/domains?q=D1&sort=domain", &s)
	if s.MatchCount != 10 || len(s.Domains) != 10 || s.Domains[0].Domain != "d10.test" {
		t.Errorf("search: %d matches, first %v", s.MatchCount, s.Domains)
	}

	for _, bad := range []struct{ query, field string }{
		{"sort=status_code", "sort"}, {"order=up", "order"}, {"limit=0", "limit"}, {"limit=x", "limit"},
		{"limit=501", "limit"}, {"cursor=zzz", "cursor"},
	} {
		var e struct{ Error, Field string }
		if code := h.getJSON(t, "/v1/domains?"+bad.query, &e); code != 400 || e.Field != bad.field {
			t.Errorf("%s: %d %+v, want 400 naming %s", bad.query, code, e, bad.field)
		}
	}
	resp, page := h.get(t, "/?sort=nope")
	if resp.StatusCode != 400 || !strings.Contains(page, "sort must be one of") {
		t.Errorf("bad sort on the page: %d", resp.StatusCode)
	}

	// The page pages too: the next link carries the cursor and keeps sort, order, q, limit.
	_, page = h.get(t, "/?sort=domain&order=desc&limit=20")
	next := regexp.MustCompile(`href="([^"]+)" id="next-page"`).FindStringSubmatch(page)
	if next == nil || next[1] == "" {
		i := strings.Index(page, "pager")
		t.Fatalf("no next page link: %s", page[max(0, i-300):min(len(page), i+300)])
	}
	href := html.UnescapeString(next[1])
	if !strings.Contains(href, "sort=domain") || !strings.Contains(href, "order=desc") || !strings.Contains(href, "limit=20") {
		t.Errorf("next link %s", href)
	}
	_, page2 := h.get(t, href)
	f := fields(t, page2)
	if f["domain:d09.test"]["domain"] == "" || f["domain:d10.test"]["domain"] != "" || f["domain:d00.test"]["domain"] == "" {
		t.Errorf("second page holds the wrong rows: %v", f)
	}
}

func TestProbes(t *testing.T) {
	h := newHarness(t, nil)
	h.traffic(t)
	var p map[string]any
	h.getJSON(t, "/v1/console/probes", &p)
	want := map[string]float64{"probe_24h_count": 5, "reached_origin_24h_count": 3, "not_reached_origin_24h_count": 2,
		"render_probe_24h_count": 1, "reached_failed_24h_count": 2}
	for k, w := range want {
		if p[k] != w {
			t.Errorf("%s = %v, want %v", k, p[k], w)
		}
	}
	_, page := h.get(t, "/probes")
	f := fields(t, page)
	for k := range want {
		if k == "reached_failed_24h_count" {
			if f["cause:reached_failed"][k] != shown(p[k]) {
				t.Errorf("page %s = %q", k, f["cause:reached_failed"][k])
			}
			continue
		}
		if f[""][k] != shown(p[k]) {
			t.Errorf("page %s = %q, JSON %v", k, f[""][k], p[k])
		}
	}
	for _, c := range p["causes"].([]any) {
		c := c.(map[string]any)
		if got := f["cause:"+c["fail_reason"].(string)]["probe_24h_count"]; got != shown(c["probe_24h_count"]) {
			t.Errorf("cause %s: page %q, JSON %v", c["fail_reason"], got, c["probe_24h_count"])
		}
	}
	samples := p["samples"].([]any)
	if len(samples) != 5 {
		t.Fatalf("%d samples", len(samples))
	}
	for i, s := range samples {
		s := s.(map[string]any)
		row := f[fmt.Sprintf("sample:%d", i)]
		for _, k := range []string{"domain", "url", "should_render", "http_status", "raw_text_length", "text_length", "has_reached_origin", "fail_reason"} {
			if row[k] != shown(s[k]) {
				t.Errorf("sample %d %s: page %q, JSON %v", i, k, row[k], s[k])
			}
		}
	}
	// Newest first: the render probe without a renderer, then the refused host.
	first := samples[0].(map[string]any)
	if first["fail_reason"] != "renderer_unavailable" || first["should_render"] != true || first["has_reached_origin"] != false {
		t.Errorf("newest sample %v", first)
	}
	if !strings.Contains(page, `href="/?q=shop.example.jp&amp;sort=domain&amp;order=asc#domain-shop.example.jp"`) {
		t.Error("a sample does not link to its domain's rate-limit row")
	}
	var lim map[string]any
	h.getJSON(t, "/v1/console/probes?limit=2", &lim)
	if n := len(lim["samples"].([]any)); n != 2 {
		t.Errorf("limit=2: %d samples", n)
	}
}

func TestStats(t *testing.T) {
	renderer := func() downloader.RendererStats {
		return downloader.RendererStats{SlotCount: 2, EffectiveSlotCount: 1, IsAdaptive: true, BusyCount: 1, RestartCount: 3, RenderedCount: 40, IsBrowserUp: true,
			RendererKind: "obscura", IsGuardRefused: true, ContextCount: 2, RecycledContextCount: 7, HeapRecycledContextCount: 5,
			GuardProxyAddr: "127.0.0.1:4100"}
	}
	h := newHarness(t, renderer)
	// Ten requests of 200 ms each (fake clock) to domains of 500 ms: politeness 2/s each.
	for i := range 10 {
		h.post(t, "/v1/probe", fmt.Sprintf(`{"url":"http://s%d.test/","should_render":false,"min_interval_ms":500}`, i))
	}
	var s map[string]any
	h.getJSON(t, "/v1/console/stats", &s)
	want := map[string]any{"active_domain_count": 10.0, "politeness_ceiling_per_second": 20.0,
		"finished_count": 10.0, "achieved_rate_per_second": 10.0, "max_concurrent_count": 8.0,
		"global_in_flight_count": 0.0, "local_queue_length": 4.0, "span_seconds": 1.0}
	// The fake clock has not moved since the observer started: the rate is averaged over
	// the process's real uptime (at least a second), not a window it has not lived.
	for k, w := range want {
		if s[k] != w {
			t.Errorf("%s = %v, want %v", k, s[k], w)
		}
	}
	// The fake clock does not move during a request: no service time, no capacity ceiling.
	if s["capacity_ceiling_per_second"] != nil || s["binding_ceiling"] != "politeness" {
		t.Errorf("capacity %v binding %v", s["capacity_ceiling_per_second"], s["binding_ceiling"])
	}
	_, page := h.get(t, "/stats")
	f := fields(t, page)[""]
	for _, k := range []string{"active_domain_count", "politeness_ceiling_per_second", "finished_count",
		"achieved_rate_per_second", "max_concurrent_count", "global_in_flight_count", "queued_count", "local_queue_length",
		"binding_ceiling", "domain_count"} {
		w := shown(s[k])
		if s[k] == nil {
			w = "—"
		}
		if k == "politeness_ceiling_per_second" || k == "achieved_rate_per_second" {
			w = fixed(s[k].(float64), 2)
		}
		if f[k] != w {
			t.Errorf("page %s = %q, JSON %v", k, f[k], s[k])
		}
	}
	r := s["renderer"].(map[string]any)
	for k, pk := range map[string]string{"slot_count": "slot_count", "busy_count": "busy_count", "restart_count": "restart_count",
		"rendered_count": "rendered_count", "is_browser_up": "is_browser_up", "queued_count": "renderer_queued_count",
		"effective_slot_count": "effective_slot_count",
		"renderer_kind":        "renderer_kind", "is_guard_refused": "is_guard_refused",
		"context_count": "context_count", "recycled_context_count": "recycled_context_count",
		"heap_recycled_context_count": "heap_recycled_context_count", "guard_proxy_addr": "guard_proxy_addr"} {
		if f[pk] != shown(r[k]) {
			t.Errorf("renderer %s: page %q, JSON %v", k, f[pk], r[k])
		}
	}
}

// TestSettingsThroughTheAPI is what the page's form does: PUT /v1/settings, which the
// runtime page and JSON then show.
func TestSettingsThroughTheAPI(t *testing.T) {
	h := newHarness(t, nil)
	req, _ := http.NewRequest(http.MethodPut, h.srv.URL+"/v1/settings", strings.NewReader(`{"max_concurrent_count":3}`))
	req.Header.Set("X-Actor", "ops")
	resp, err := h.srv.Client().Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT: %v %v", resp, err)
	}
	resp.Body.Close()
	var rt Runtime
	h.getJSON(t, "/v1/console/runtime", &rt)
	if rt.MaxConcurrentCount != 3 || h.gate.Capacity() != 3 {
		t.Errorf("max_concurrent_count %d, gate %d", rt.MaxConcurrentCount, h.gate.Capacity())
	}
	_, page := h.get(t, "/")
	if got := fields(t, page)[""]["max_concurrent_count"]; got != "3" {
		t.Errorf("page shows %q", got)
	}
}

// TestSelfContained checks that the pages load nothing from any other host and forbid it.
func TestSelfContained(t *testing.T) {
	h := newHarness(t, nil)
	h.traffic(t)
	absolute := regexp.MustCompile(`(?i)(src|href|action)\s*=\s*"(https?:)?//`)
	for _, path := range []string{"/", "/probes", "/stats"} {
		resp, page := h.get(t, path)
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		if m := absolute.FindString(page); m != "" {
			t.Errorf("%s references another host: %s", path, m)
		}
		if strings.Contains(page, "<script>") || strings.Contains(page, "style=") {
			t.Errorf("%s has inline script or style (the CSP forbids them)", path)
		}
	}
	err := fs.WalkDir(assetFS, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := fs.ReadFile(assetFS, p)
		// Stylesheets load nothing; scripts only call the service's own paths (the CSP
		// enforces both in the browser). The action's default target "https://" + domain
		// is data, not a load.
		if regexp.MustCompile(`(?i)url\(\s*['"]?(https?:)?//|@import|fetch\(\s*["'` + "`" + `]?(https?:)?//|XMLHttpRequest|WebSocket|<script`).Match(b) {
			t.Errorf("%s references another host", p)
		}
		resp, _ := h.get(t, "/"+p)
		if resp.StatusCode != 200 {
			t.Errorf("GET /%s: %d", p, resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := h.get(t, "/assets/console.js")
	if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "javascript") {
		t.Errorf("console.js Content-Type %q", ct)
	}
	if resp, _ := h.get(t, "/nothing-here"); resp.StatusCode != 404 {
		t.Errorf("an unknown path is %d, not the console", resp.StatusCode)
	}
}

func TestNumberFormats(t *testing.T) {
	tests := []struct{ got, want string }{
		{num(0), "0"}, {num(999), "999"}, {num(1000), "1,000"}, {num(uint64(128540)), "128,540"},
		{num(int64(-1234567)), "-1,234,567"}, {fixed(1234.567, 2), "1,234.57"}, {fixed(0.0035*100, 2), "0.35"},
		{optFixed(nil, 2), "—"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%q, want %q", tt.got, tt.want)
		}
	}
}

// BenchmarkRuntimePage serves the domain runtime page (the per-domain table's first page
// of 50) over 10^5 domains: cold (a new copy of the table and a sort) and warm (the copy
// of the last two seconds, another sort order already cached).
func BenchmarkRuntimePage(b *testing.B) {
	clk := clocktest.NewFake(t0)
	lim := limiter.New(clk)
	clk.Advance(2 * time.Hour)
	for i := range 100_000 {
		a, _ := lim.Allow(clk.Now(), fmt.Sprintf("d%06d.example.com", i), time.Duration(1+i%4)*time.Second,
			downloader.IntervalSourceLease, downloader.EntryLease)
		a.Done()
	}
	obs := observe.New(observe.Config{Clock: clk})
	gate := limiter.NewGate(8, 4)
	eng := engine.New(engine.Config{Clock: clk, Limiter: lim, Gate: gate, Fetcher: fetcher{clk}, Observer: obs})
	con, err := New(Config{Clock: clk, Settings: eng, Limiter: lim, Gate: gate, Observer: obs, Domains: observe.NewDomainTable(lim, 0)})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	con.Register(mux)
	get := func(path string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != 200 {
			b.Fatalf("%s: %d", path, rec.Code)
		}
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			clk.Advance(observe.DefaultSnapshotTTL)
			get("/")
		}
	})
	get("/?sort=domain")
	b.Run("warm", func(b *testing.B) {
		for b.Loop() {
			get("/?sort=domain&order=asc&q=d0123")
		}
	})
}

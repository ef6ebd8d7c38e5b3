package console

import (
	"downloader"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"downloader/observe"
)

// hasClass tells whether n's class attribute lists c.
func hasClass(n *html.Node, c string) bool {
	v, _ := attr(n, "class")
	for _, x := range strings.Fields(v) {
		if x == c {
			return true
		}
	}
	return false
}

// each calls f for every element of the page.
func each(t *testing.T, page string, f func(n *html.Node)) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			f(n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
}

var (
	latin = regexp.MustCompile(`[A-Za-z]{3,}`)
	han   = regexp.MustCompile(`\p{Han}`)
)

// TestNotesAreBilingual: every explanatory note of every page says it in English beside
// the Chinese.
func TestNotesAreBilingual(t *testing.T) {
	h := newHarness(t, nil)
	h.traffic(t)
	for _, path := range []string{"/", "/probes", "/stats"} {
		_, page := h.get(t, path)
		notes := 0
		each(t, page, func(n *html.Node) {
			if !hasClass(n, "note") {
				return
			}
			notes++
			var en, zh string
			var find func(c *html.Node)
			find = func(c *html.Node) {
				if c.Type == html.ElementNode {
					switch lang, _ := attr(c, "lang"); lang {
					case "en":
						en += text(c)
					case "zh-CN":
						zh += text(c)
					}
				}
				for k := c.FirstChild; k != nil; k = k.NextSibling {
					find(k)
				}
			}
			find(n)
			if !latin.MatchString(en) || han.MatchString(en) || !han.MatchString(zh) {
				t.Errorf("%s: a note without English beside the Chinese: en %q, zh %q", path, en, zh)
			}
		})
		if notes < 2 {
			t.Errorf("%s: %d notes", path, notes)
		}
	}
}

// TestNoWarningOnHealthyStates: the warning mark is drawn only for class alert, and a
// healthy service (egress up, the renderer up, few limit triggers) shows no alert.
func TestNoWarningOnHealthyStates(t *testing.T) {
	css, err := assetFS.ReadFile("assets/console.css")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(css), "\n") {
		if strings.Contains(line, "⚠") && !strings.HasPrefix(line, "p.note.alert::before") {
			t.Errorf("the warning mark outside p.note.alert: %s", line)
		}
	}
	h := newHarness(t, upRenderer)
	// 300 requests, one over the limit (0.33%, the seeds' usual share).
	for i := range 300 {
		if code := h.post(t, "/v1/probe", `{"url":"http://d`+itoa(i)+`.example.com/","should_render":false,"min_interval_ms":0}`); code != 200 {
			t.Fatalf("probe %d: %d", i, code)
		}
	}
	h.post(t, "/v1/probe", `{"url":"http://once.example.com/","should_render":false,"min_interval_ms":60000}`)
	h.post(t, "/v1/probe", `{"url":"http://once.example.com/","should_render":false,"min_interval_ms":60000}`)
	for _, path := range []string{"/", "/probes", "/stats"} {
		_, page := h.get(t, path)
		if strings.Contains(page, "⚠") {
			t.Errorf("%s prints a warning mark in the page itself", path)
		}
		each(t, page, func(n *html.Node) {
			if hasClass(n, "alert") {
				t.Errorf("%s: an alert on a healthy service: %q", path, strings.Join(strings.Fields(text(n)), " "))
			}
		})
	}
	_, page := h.get(t, "/")
	if lvl := fields(t, page)[""]["over_limit_level"]; lvl != "usual" {
		t.Errorf("1 of 302: level %q, want usual", lvl)
	}
}

func itoa(i int) string {
	return string(rune('a'+i/26%26)) + string(rune('a'+i%26)) + string(rune('a'+i/676))
}

// TestOverLimitNoteFollowsTheRatio: the note under the status cards words the actual share.
func TestOverLimitNoteFollowsTheRatio(t *testing.T) {
	tests := []struct {
		requests, over uint64
		level, says    string
		isAlert        bool
	}{
		{0, 0, "none", "No request in the last 24 hours", false},
		{1000, 3, "usual", "rarely triggering is normal", false},
		{1000, 10, "usual", "rarely triggering is normal", false},
		{1000, 30, "elevated", "Higher than usual", false},
		{1000, 50, "elevated", "Higher than usual", false},
		{1000, 51, "high", "Far above the usual 0.35%", true},
		{7, 2, "high", "Far above the usual 0.35%", true},
	}
	h := newHarness(t, nil)
	con, err := New(Config{Clock: h.clk, Settings: h.eng, Limiter: h.lim, Gate: h.gate, Observer: h.obs, Domains: observe.NewDomainTable(h.lim, time.Nanosecond)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		v := &runtimeView{Base: Base{Page: "runtime"}}
		v.Request24hCount, v.OverLimit24hCount = tt.requests, tt.over
		if tt.requests > 0 {
			v.OverLimitRatio = float64(tt.over) / float64(tt.requests)
		}
		if got := v.OverLimitLevel(); got != tt.level {
			t.Errorf("%d of %d: level %q, want %q", tt.over, tt.requests, got, tt.level)
		}
		var b strings.Builder
		if err := con.pages["runtime"].Execute(&b, v); err != nil {
			t.Fatal(err)
		}
		each(t, b.String(), func(n *html.Node) {
			if id, _ := attr(n, "id"); id == "over-limit-note" {
				note := strings.Join(strings.Fields(text(n)), " ")
				if !strings.Contains(note, tt.says) || hasClass(n, "alert") != tt.isAlert {
					t.Errorf("%d of %d: alert %v, note %q; want alert %v and %q", tt.over, tt.requests, hasClass(n, "alert"), note, tt.isAlert, tt.says)
				}
			}
		})
	}
	// And on the page, with real traffic: 2 of 7 over the limit is far above usual.
	h.traffic(t)
	_, page := h.get(t, "/")
	var note string
	var isAlert bool
	each(t, page, func(n *html.Node) {
		if id, _ := attr(n, "id"); id == "over-limit-note" {
			note, isAlert = strings.Join(strings.Fields(text(n)), " "), hasClass(n, "alert")
		}
	})
	if !strings.Contains(note, "28.57%") || !strings.Contains(note, "Far above the usual 0.35%") || !isAlert {
		t.Errorf("2 of 7 over the limit: alert %v, note %q", isAlert, note)
	}
	if strings.Contains(note, "is normal") {
		t.Errorf("a 28.57%% share is called normal: %q", note)
	}
}

// TestCharts: each page draws its 24 h charts as inline SVG, one bar group per hour,
// whose totals and values equal GET /v1/console/hours.
func TestCharts(t *testing.T) {
	h := newHarness(t, upRenderer)
	h.traffic(t)
	h.clk.Advance(3 * time.Hour)
	h.post(t, "/v1/probe", `{"url":"http://later.example.com/","should_render":false}`)
	var hours Hours
	if code := h.getJSON(t, "/v1/console/hours", &hours); code != 200 || len(hours.Hours) != 24 {
		t.Fatalf("hours: %d, %d buckets", code, len(hours.Hours))
	}
	var req, over, probes uint64
	for _, x := range hours.Hours {
		req += x.RequestCount
		over += x.OverLimitCount
		probes += x.ProbeReachedCount + x.ProbeNotReachedCount
	}
	if req != 8 || over != 2 || probes != 6 {
		t.Fatalf("hours sum to %d requests, %d over limit, %d probes", req, over, probes)
	}
	want := map[string]map[string]string{
		"/":       {"requests": num(req), "over_limit": num(over)},
		"/probes": {"probes": num(probes)},
		"/stats":  {"render_latency": "0"},
	}
	for path, charts := range want {
		_, page := h.get(t, path)
		f := fields(t, page)
		for id, total := range charts {
			row := f["chart:"+id]
			if row["chart_total"] != total || row["bar_count"] != "24" {
				t.Errorf("%s chart %s: total %q, %q bars; want %s and 24", path, id, row["chart_total"], row["bar_count"], total)
			}
		}
		svgs, groups := 0, 0
		each(t, page, func(n *html.Node) {
			switch {
			case n.Data == "svg":
				svgs++
			case n.Data == "g" && hasClass(n, "hour"):
				groups++
			}
		})
		if svgs != len(charts) || groups != 24*len(charts) {
			t.Errorf("%s: %d svg and %d hour groups, want %d and %d", path, svgs, groups, len(charts), 24*len(charts))
		}
	}
	// The newest hour's requests bar carries its count; the tallest bar fills the plot.
	_, page := h.get(t, "/")
	re := regexp.MustCompile(`<g class="hour" data-start-at="([^"]+)"><title>([^<]*)</title><rect class="hit"[^>]*></rect><rect class="bar[^"]*" x="[^"]+" y="([^"]+)" width="[^"]+" height="([^"]+)" data-value="([^"]+)"`)
	bars := re.FindAllStringSubmatch(page, -1)
	if len(bars) != 48 {
		t.Fatalf("%d bars on the runtime page, want 48", len(bars))
	}
	last := bars[23]
	if last[5] != num(hours.Hours[23].RequestCount) || !strings.Contains(last[2], "requests 1") {
		t.Errorf("the newest hour's bar %q", last[0])
	}
	for _, b := range bars[:24] {
		if b[5] == "7" && b[4] != "84" {
			t.Errorf("the tallest bar (7 of a scale of 10) is %s high, want 84", b[4])
		}
	}
}

// TestSettingsForm: the cap form's POST changes max_concurrent_count, logs who asked, and
// names the field of a bad value.
func TestSettingsForm(t *testing.T) {
	h := newHarness(t, nil)
	post := func(form url.Values, site string) (int, string) {
		req, _ := http.NewRequest("POST", h.srv.URL+"/console/settings", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", site)
		resp, err := h.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(url.Values{"max_concurrent_count": {"5"}, "actor": {"ops"}}, "same-origin"); code != 200 || !strings.Contains(body, `"max_concurrent_count":5`) {
		t.Fatalf("form: %d %s", code, body)
	}
	if h.gate.Capacity() != 5 {
		t.Errorf("gate %d after the form", h.gate.Capacity())
	}
	for _, bad := range []string{"", "x", "0", "-3", "1000001"} {
		if code, body := post(url.Values{"max_concurrent_count": {bad}}, "same-origin"); code != 400 || !strings.Contains(body, `"field":"max_concurrent_count"`) {
			t.Errorf("max_concurrent_count %q: %d %s", bad, code, body)
		}
	}
	if code, _ := post(url.Values{"max_concurrent_count": {"6"}}, "cross-site"); code != 403 || h.gate.Capacity() != 5 {
		t.Errorf("a cross-site form post: %d, capacity %d", code, h.gate.Capacity())
	}
}

// TestStatesInWords: every rate-limit state reads as words, in English and Chinese.
func TestStatesInWords(t *testing.T) {
	h := newHarness(t, nil)
	h.traffic(t)
	_, page := h.get(t, "/")
	if !strings.Contains(page, "rate-limited: probes not sent (C)") || !strings.Contains(page, "rate-limited: renders answered 429 (B)") ||
		!regexp.MustCompile(`<span class="state normal">ok<small>正常</small></span>`).MatchString(page) {
		t.Error("the domain states are not in words")
	}
	for _, s := range []string{"over_limit_a", "over_limit_b", "over_limit_c", "normal"} {
		w := stateLabel(limiterState(s))
		if !regexp.MustCompile(`^[a-z]{2,}`).MatchString(w[0]) || !han.MatchString(w[1]) {
			t.Errorf("state %s reads %q", s, w)
		}
	}
}

func limiterState(s string) downloader.RateState { return downloader.RateState(s) }

// upRenderer is a renderer pool that is up.
func upRenderer() downloader.RendererStats {
	return downloader.RendererStats{SlotCount: 1, IsBrowserUp: true}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"downloader/origintest"
)

// glance is what a console page looks like at 1280 px, read in the browser.
type glance struct {
	NoteCount         int          `json:"note_count"`
	NotesWithoutEn    []string     `json:"notes_without_en"`
	MarkedHealthy     []string     `json:"marked_healthy"` // a ⚠ on a note that is not an alert
	PageWidth         int          `json:"page_width"`
	ViewportWidth     int          `json:"viewport_width"`
	Tables            []tableWidth `json:"tables"`
	ChartHours        []int        `json:"chart_hours"` // per chart, its hour groups
	ChartWidthOverrun int          `json:"chart_width_overrun"`
}

type tableWidth struct {
	Name        string `json:"name"`
	ScrollWidth int    `json:"scroll_width"`
	Right       int    `json:"right"`
}

const glanceJS = `(() => {
	const out = {note_count: 0, notes_without_en: [], marked_healthy: [], tables: [], chart_hours: [], chart_width_overrun: 0};
	document.querySelectorAll("p.note").forEach((n) => {
		out.note_count++;
		const en = n.querySelector('[lang="en"]');
		const zh = n.querySelector('[lang="zh-CN"]');
		if (!en || !/[A-Za-z]{3,}/.test(en.textContent) || !zh || !/\p{Script=Han}/u.test(zh.textContent)) {
			out.notes_without_en.push(n.textContent.trim().slice(0, 80));
		}
		const mark = getComputedStyle(n, "::before").content;
		if (mark.includes("⚠") && !n.classList.contains("alert")) out.marked_healthy.push(n.textContent.trim().slice(0, 80));
	});
	out.page_width = document.documentElement.scrollWidth;
	out.viewport_width = window.innerWidth;
	document.querySelectorAll("table").forEach((t) => {
		out.tables.push({name: t.id || t.className, scroll_width: t.scrollWidth, right: Math.ceil(t.getBoundingClientRect().right)});
	});
	document.querySelectorAll("svg.chart-svg").forEach((s) => {
		out.chart_hours.push(s.querySelectorAll("g.hour").length);
		if (s.getBoundingClientRect().right > window.innerWidth) out.chart_width_overrun++;
	});
	return out;
})()`

// checkGlance loads path in a 1280-wide tab and checks that it reads at a glance: every
// note in English beside the Chinese, no warning mark on a note that is not an alert,
// charts hours of 24 bars each, and neither the page nor any table wider than 1280 px.
func checkGlance(t *testing.T, b *browser, base, path string, charts int) {
	t.Helper()
	ctx := b.tab(t)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main"))); err != nil {
		t.Fatal(err)
	}
	g, err := chromedp.Run(ctx, chromedp.Evaluate[glance](glanceJS))
	if err != nil {
		t.Fatal(err)
	}
	if g.ViewportWidth != 1280 {
		t.Fatalf("%s: viewport %d px, want 1280", path, g.ViewportWidth)
	}
	if g.NoteCount < 2 || len(g.NotesWithoutEn) > 0 {
		t.Errorf("%s: %d notes, without English beside the Chinese: %q", path, g.NoteCount, g.NotesWithoutEn)
	}
	if len(g.MarkedHealthy) > 0 {
		t.Errorf("%s: a warning mark on notes that are no alert: %q", path, g.MarkedHealthy)
	}
	if g.PageWidth > 1280 {
		t.Errorf("%s: the page is %d px wide at 1280 px", path, g.PageWidth)
	}
	for _, tw := range g.Tables {
		if tw.ScrollWidth > 1280 || tw.Right > 1280 {
			t.Errorf("%s: table %q overflows 1280 px: scrollWidth %d, right edge %d", path, tw.Name, tw.ScrollWidth, tw.Right)
		}
	}
	if len(g.ChartHours) != charts || g.ChartWidthOverrun > 0 {
		t.Errorf("%s: charts %v (%d wider than the page), want %d charts", path, g.ChartHours, g.ChartWidthOverrun, charts)
	}
	for _, n := range g.ChartHours {
		if n != 24 {
			t.Errorf("%s: a chart of %d hours, want 24", path, n)
		}
	}
	t.Logf("%s at 1280 px: page %d px wide, %d tables, %d notes, charts %v", path, g.PageWidth, len(g.Tables), g.NoteCount, g.ChartHours)
}

// TestConsoleSignInInChromium: with --api-token and --admin-token set, no console page
// shows a domain or a URL before signing in; the sign-in page keeps the token out of
// every URL and sets an HttpOnly, SameSite=Strict cookie; after signing in the pages work
// in real Chromium (at 1280 px without overflow, a probe action runs with the session);
// the cap form needs the admin token; and a cross-site POST of the cap form from another
// origin, with the admin session's cookie attached, is refused.
func TestConsoleSignInInChromium(t *testing.T) {
	t.Parallel() // owns its service, origin and data dir (longTests in main_test.go)
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no headless Chromium at %s (scripts/test.sh installs it)", chromiumPath)
	}
	origin := origintest.New(http.HandlerFunc(origintest.Page))
	defer origin.Close()
	const apiToken, adminToken = "read-secret-1234", "admin-secret-5678"
	s := startTestService(t, "--connect-to", origin.ConnectTo(), "--api-token", apiToken, "--admin-token", adminToken,
		"--default-min-interval-ms", "0", "--max-concurrent-count", "8", "--render-concurrency", "1")
	browser := newBrowser(t)

	// Traffic to leak: probes with the API token, one of a long URL.
	longPath := "/" + strings.Repeat("very-long-path-segment/", 12) + "?q=" + strings.Repeat("x", 80)
	for _, u := range []string{"http://secret-domain.example.org/", "http://secret-domain.example.org" + longPath,
		"http://" + strings.Repeat("sub.", 12) + "secret-host.example.net/"} {
		req, _ := http.NewRequest("POST", s.base+"/v1/probe", strings.NewReader(`{"url":"`+u+`","should_render":false,"min_interval_ms":0}`))
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("probe %s: %d", u, resp.StatusCode)
		}
	}

	t.Run("nothing shows before signing in", func(t *testing.T) {
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for _, path := range []string{"/", "/probes", "/stats", "/?q=example", "/v1/domains", "/v1/console/probes", "/v1/console/hours"} {
			resp, err := client.Get(s.base + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusSeeOther && resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s without signing in: %d", path, resp.StatusCode)
			}
			if strings.Contains(string(body), "secret") {
				t.Errorf("GET %s without signing in shows %q", path, body)
			}
		}
		ctx := browser.tab(t)
		if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/probes"), chromedp.WaitVisible(chromedp.CSS("#signin-form"))); err != nil {
			t.Fatal(err)
		}
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(text, "secret") || strings.Contains(text, "example.") {
			t.Errorf("the sign-in page shows a domain or URL:\n%s", text)
		}
		// A wrong token is refused, and sets no cookie.
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#signin-token"), "wrong"), chromedp.Click(chromedp.CSS("#signin-submit")),
			chromedp.WaitVisible(chromedp.CSS("#signin-error"))); err != nil {
			t.Fatal(err)
		}
		cookies, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{s.base}})
		if err != nil || len(cookies.Cookies) != 0 {
			t.Errorf("after a wrong token: cookies %v (%v)", cookies.Cookies, err)
		}
		shots := t.TempDir()
		if *updateDocs {
			shots = filepath.Join("..", "..", "docs")
		}
		screenshot(t, browser, s.base+"/signin?next=%2F", filepath.Join(shots, "console-signin.png"))
	})

	// One tab for the signed-in steps (every tab of the browser shares its cookies), with a
	// bound on all of them.
	ctx, cancelTab := chromedp.NewContext(browser.ctx)
	defer cancelTab()
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelTimeout()
	signIn := func(t *testing.T, token, next string) {
		t.Helper()
		err := chromedp.Do(ctx, chromedp.Navigate(s.base+next), chromedp.WaitVisible(chromedp.CSS("#signin-form")),
			chromedp.SetValue(chromedp.CSS("#signin-token"), token))
		if err != nil {
			t.Fatal(err)
		}
		// The click posts the form; the answer redirects to next, a page of the console.
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#signin-submit")))
		if err != nil || resp.Status != 200 {
			t.Fatalf("signing in: %v %v", resp, err)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`body:not([data-page="signin"]) main h1`))); err != nil {
			t.Fatal(err)
		}
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil || loc != s.base+next {
			t.Fatalf("after signing in the tab is at %q (%v), want %s", loc, err, s.base+next)
		}
		hist, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + " " + document.referrer`))
		if err != nil || strings.Contains(hist, token) {
			t.Errorf("the token is in a URL: %q (%v)", hist, err)
		}
	}
	sessionCookie := func(t *testing.T) *network.Cookie {
		t.Helper()
		res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{s.base}})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res.Cookies {
			if c.Name == "downloader_session" {
				return c
			}
		}
		t.Fatalf("no session cookie in %v", res.Cookies)
		return nil
	}

	t.Run("signed in with the read token, the pages work", func(t *testing.T) {
		signIn(t, apiToken, "/probes")
		c := sessionCookie(t)
		if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || strings.Contains(c.Value, apiToken) {
			t.Errorf("session cookie: HttpOnly %v, SameSite %q, holds the token %v", c.HTTPOnly, c.SameSite, strings.Contains(c.Value, apiToken))
		}
		if v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`)); err != nil || v != "" {
			t.Errorf("scripts can read the cookie: %q (%v)", v, err)
		}
		page, err := chromedp.Run(ctx, chromedp.Evaluate[pageFields](extractJS))
		if err != nil {
			t.Fatal(err)
		}
		if page["sample:0"]["domain"] == "" || page[""]["session_role"] != "api" {
			t.Errorf("the probes page after signing in: %v", page)
		}
		// The probe action runs entry C with the session (cookie and CSRF token).
		err = chromedp.Do(ctx, chromedp.Navigate(s.base+"/?sort=domain&order=asc"),
			chromedp.Click(chromedp.CSS(`tr[data-row="domain:secret-domain.example.org"] button[data-action="probe"]`)),
			chromedp.WaitVisible(chromedp.CSS("#action-panel")),
			chromedp.SetValue(chromedp.CSS("#action-url"), "http://secret-domain.example.org/"),
			chromedp.Click(chromedp.CSS("#action-run")),
			chromedp.Poll[chromedp.Void](`document.getElementById("action-result").dataset.status !== undefined`, chromedp.WithPollingTimeout(15*time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("action-result").dataset.status`)); st != "200" {
			out, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#action-result")))
			t.Errorf("the probe action with the read session: %s", out)
		}
		// The cap form needs the admin token: refused with the read session alone.
		err = chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#action-close")), chromedp.SetValue(chromedp.CSS("#new-max-concurrent-count"), "3"),
			chromedp.Click(chromedp.CSS("#settings-submit")), chromedp.WaitVisible(chromedp.CSS("#settings-confirm")),
			chromedp.Click(chromedp.CSS("#settings-yes")),
			chromedp.Poll[chromedp.Void](`document.getElementById("settings-result").textContent !== ""`, chromedp.WithPollingTimeout(10*time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#settings-result"))); !strings.Contains(out, "401") {
			t.Errorf("the cap form with the read session: %q, want a 401", out)
		}
		if m := settingsOf(t, s, apiToken); m != 8 {
			t.Errorf("max_concurrent_count %v after a refused change", m)
		}
		for path, charts := range map[string]int{"/": 2, "/probes": 1, "/stats": 1} {
			checkGlance(t, browser, s.base, path, charts) // a new tab of the same browser: the same cookies
		}
	})

	t.Run("signed in with the admin token, the cap form works", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.CSS("#sign-out"))); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#sign-out"))); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#signin-form"))); err != nil {
			t.Fatal(err)
		}
		if loc, _ := chromedp.Run(ctx, chromedp.Location()); loc != s.base+"/signin" {
			t.Errorf("after signing out the tab is at %q", loc)
		}
		if res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{s.base}}); err != nil || len(res.Cookies) != 0 {
			t.Errorf("after signing out the browser keeps cookies %v (%v)", res.Cookies, err)
		}
		signIn(t, adminToken, "/")
		err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#new-max-concurrent-count"), "5"), chromedp.SetValue(chromedp.CSS("#actor"), "e2e"),
			chromedp.Click(chromedp.CSS("#settings-submit")), chromedp.WaitVisible(chromedp.CSS("#settings-confirm")),
			chromedp.Click(chromedp.CSS("#settings-yes")),
			chromedp.Poll[chromedp.Void](`document.getElementById("settings-result").textContent !== ""`, chromedp.WithPollingTimeout(10*time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#settings-result"))); !strings.Contains(out, "✓") {
			t.Errorf("the cap form with the admin session: %q", out)
		}
		if m := settingsOf(t, s, apiToken); m != 5 {
			t.Errorf("max_concurrent_count %v, want 5", m)
		}
	})

	t.Run("a cross-site POST of the cap form is refused", func(t *testing.T) {
		// Another origin on this machine (another port is the same site, so the
		// SameSite=Strict cookie is sent: the server's own check must refuse it).
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `<!doctype html><form id="csrf" method="post" action="%s/console/settings">
<input name="max_concurrent_count" value="1"><button id="go" type="submit">go</button></form>`, s.base)
		}))
		defer evil.Close()
		before := settingsOf(t, s, apiToken)
		if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.CSS("#go"))); err != nil {
			t.Fatal(err)
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#go")))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		if resp.Status != 403 || !strings.Contains(body, "cross-site") {
			t.Errorf("the cross-site post was answered %d %q, want 403", resp.Status, body)
		}
		if after := settingsOf(t, s, apiToken); after != before || after == 1 {
			t.Errorf("a cross-site post changed max_concurrent_count from %v to %v", before, after)
		}
		// The session cookie was there: the refusal is the server's, not the browser's.
		if c := sessionCookie(t); c == nil {
			t.Error("no session")
		}
		// And a form post from the console's own origin without its CSRF token is refused too.
		plain, err := http.PostForm(s.base+"/console/settings", url.Values{"max_concurrent_count": {"1"}})
		if err != nil {
			t.Fatal(err)
		}
		plain.Body.Close()
		if plain.StatusCode != 401 {
			t.Errorf("a form post without a session or token: %d, want 401", plain.StatusCode)
		}
	})
}

// settingsOf reads max_concurrent_count through the API.
func settingsOf(t *testing.T, s *testService, token string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", s.base+"/v1/settings", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	v, _ := m["max_concurrent_count"].(float64)
	return v
}

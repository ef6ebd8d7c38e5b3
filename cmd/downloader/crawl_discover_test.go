package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"downloader/origintest"
)

func gz(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func newDiscoverSite(t *testing.T) (*origintest.Origin, map[string]bool) {
	n := 0
	html := func(links ...string) string {
		n++ // every page's body its own, but for the two meant to be the same
		var b strings.Builder
		fmt.Fprintf(&b, "<!doctype html><html><head><title>page %d</title></head><body>", n)
		for _, l := range links {
			b.WriteString(l)
		}
		b.WriteString("</body></html>")
		return b.String()
	}
	a := func(href string) string { return `<a href="` + href + `">x</a>` }
	dupBody := "<!doctype html><html><body><p>the same body under two URLs</p></body></html>"
	pages := map[string]string{
		"www.site.test/": html(a("/a"), a("./a/../b#frag"), a("HTTP://WWW.SITE.TEST:80/a"),
			`<a rel="nofollow" href="/nofollowed">n</a>`, a("http://blog.site.test/"),
			a("http://other.test/out"), a("/private/p"), a("mailto:x@site.test"), a("javascript:void(0)")),
		"www.site.test/a": html(a("/c?x=1&a=2"), a("/deep1")),
		"www.site.test/b": `<!doctype html><html><head><meta name="robots" content="noindex, nofollow"></head><body>` +
			a("/meta-nofollowed") + `</body></html>`,
		"www.site.test/c":               html(a("/dup1"), a("/dup2")),
		"www.site.test/deep1":           html(a("/deep2")),
		"www.site.test/deep2":           html(a("/deep3")), // depth 3: its links are not followed
		"www.site.test/dup1":            dupBody,
		"www.site.test/dup2":            dupBody,
		"www.site.test/from-sitemap-1":  html(),
		"www.site.test/from-sitemap-2":  html(a("/a")),
		"blog.site.test/":               `<html><head><base href="http://blog.site.test/posts/"></head><body>` + a("one") + a("http://shop.site.test/") + `</body></html>`,
		"blog.site.test/posts/one":      html(),
		"blog.site.test/post-in-map":    html(),
		"shop.site.test/":               html(`<area href="/item?id=2&amp;b=1">`, `<link rel="next" href="/page2">`, `<link rel="stylesheet" href="/style.css">`),
		"shop.site.test/item":           html(),
		"shop.site.test/page2":          html(),
		"www.site.test/sitemap_index.x": "",
	}
	delete(pages, "www.site.test/sitemap_index.x")
	urlset := func(locs ...string) string {
		var b strings.Builder
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">`)
		for _, l := range locs {
			fmt.Fprintf(&b, "<url><loc>%s</loc></url>", l)
		}
		b.WriteString("</urlset>")
		return b.String()
	}
	pagesGz := gz(t, urlset("http://www.site.test/from-sitemap-1", "http://www.site.test/from-sitemap-2", "http://other.test/in-sitemap"))
	files := map[string]struct {
		ct   string
		body []byte
	}{
		"www.site.test/robots.txt": {"text/plain", []byte("User-agent: *\nDisallow: /private\nSitemap: http://www.site.test/sitemap_index.xml\n")},
		"www.site.test/sitemap_index.xml": {"application/xml", []byte(`<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">` +
			`<sitemap><loc>http://www.site.test/sitemap-pages.xml.gz</loc></sitemap></sitemapindex>`)},
		"www.site.test/sitemap-pages.xml.gz": {"application/gzip", pagesGz},
		"blog.site.test/sitemap.xml":         {"application/xml", []byte(urlset("http://blog.site.test/post-in-map"))},
	}
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if f, ok := files[host+r.URL.Path]; ok {
			w.Header().Set("Content-Type", f.ct)
			w.Write(f.body)
			return
		}
		if p, ok := pages[host+r.URL.Path]; ok {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, p)
			return
		}
		http.Error(w, "no "+host+r.URL.Path, http.StatusNotFound)
	}))
	want := map[string]bool{}
	for k := range pages {
		want[k] = true
	}
	delete(want, "www.site.test/deep3") // not a page of the site anyway: depth bound shown by its absence below
	return origin, want
}

// TestCrawlDiscoversASite runs the built program on one seed URL of a site of three hosts
// (and links out of it): every page in scope within --max-depth is fetched once, through
// links (a, area, link rel=next, base href), robots.txt's sitemap index and its .gz
// sitemap, and a host's /sitemap.xml; nothing out of scope, disallowed, nofollowed or
// deeper is requested; the arrivals at each host are never closer than its interval; the
// same body under two URLs is one page and one WARC revisit record.
func TestCrawlDiscoversASite(t *testing.T) {
	bin := buildBinary(t)
	origin, want := newDiscoverSite(t)
	defer origin.Close()
	dir := t.TempDir()
	seed := writeFile(t, "http://www.site.test/")
	warcPath := filepath.Join(dir, "pages.warc.gz")
	const interval = 150 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(crawlArgs(filepath.Join(dir, "data"), origin,
		"--default-min-interval-ms", fmt.Sprint(interval.Milliseconds()), "--max-depth", "3", "--scope", "domain",
		"--warc", warcPath), seed)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("crawl: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}

	got := map[string]int{}
	for _, a := range origin.Arrivals() {
		got[a.Host+a.Path]++
	}
	for k := range want {
		if got[k] != 1 {
			t.Errorf("%s requested %d times, want once", k, got[k])
		}
	}
	// The sitemaps, robots.txt and the /sitemap.xml asked of each host are the only
	// requests beyond the pages.
	extra := map[string]bool{
		"www.site.test/robots.txt": true, "blog.site.test/robots.txt": true, "shop.site.test/robots.txt": true,
		"www.site.test/sitemap_index.xml": true, "www.site.test/sitemap-pages.xml.gz": true,
		"www.site.test/sitemap.xml": true, "blog.site.test/sitemap.xml": true, "shop.site.test/sitemap.xml": true,
	}
	var unexpected []string
	for k, n := range got {
		if !want[k] && !extra[k] {
			unexpected = append(unexpected, fmt.Sprintf("%s×%d", k, n))
		}
		if extra[k] && n != 1 {
			t.Errorf("%s requested %d times, want once", k, n)
		}
	}
	sort.Strings(unexpected)
	if len(unexpected) > 0 {
		// other.test (out of scope), /private (robots.txt), /nofollowed and
		// /meta-nofollowed (nofollow), /deep3 (past --max-depth) among them.
		t.Errorf("requested outside the crawl: %v", unexpected)
	}
	for _, k := range []string{"www.site.test/robots.txt", "www.site.test/sitemap_index.xml", "www.site.test/sitemap-pages.xml.gz", "blog.site.test/sitemap.xml"} {
		if got[k] != 1 {
			t.Errorf("%s requested %d times, want once", k, got[k])
		}
	}
	if v := origin.Violations(func(string) (time.Duration, bool) { return interval, true }, 2*time.Millisecond); len(v) > 0 {
		t.Errorf("arrivals closer than the interval: %v", v)
	}
	if n := origin.UnstampedCount(); n > 0 {
		t.Errorf("%d arrivals without a kernel time", n)
	}
	sum := squash(stdout.String())
	for _, s := range []string{"duplicate payloads 1", "sitemaps read 3 with 5 URLs", "nofollow 1 links, 1 pages"} {
		if !strings.Contains(sum, s) {
			t.Errorf("summary lacks %q:\n%s", s, stdout.String())
		}
	}
	if n := countWARCRecords(t, warcPath, "revisit"); n != 1 {
		t.Errorf("%d revisit records, want 1", n)
	}
}

// TestCrawlDiscoveryBounds: --max-page-count bounds the tasks of a discovering crawl, and
// bad discovery flags are refused before anything is queued.
func TestCrawlDiscoveryBounds(t *testing.T) {
	origin, _ := newDiscoverSite(t)
	defer origin.Close()
	dir := t.TempDir()
	seed := writeFile(t, "http://www.site.test/")
	var stdout, stderr syncBuffer
	args := append(crawlArgs(filepath.Join(dir, "data"), origin, "--default-min-interval-ms", "0",
		"--max-depth", "3", "--scope", "domain", "--max-page-count", "6"), seed)
	if err := run(context.Background(), args, noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("crawl: %v\n%s", err, stderr.String())
	}
	pages := 0
	for _, a := range origin.Arrivals() {
		if a.Path != "/robots.txt" {
			pages++
		}
	}
	sum := squash(stdout.String())
	if pages > 6 || !strings.Contains(sum, "tasks 6") || !strings.Contains(sum, "over --max-page-count") {
		t.Errorf("%d requests beside robots.txt, want at most 6; summary:\n%s", pages, stdout.String())
	}
	for _, bad := range [][]string{
		{"--max-depth", "-1"},
		{"--max-depth", "1", "--scope", "site"},
		{"--max-depth", "1", "--scope", "hosts"},
		{"--max-depth", "1", "--scope-include", "("},
		{"--max-depth", "1", "--max-page-count", "-2"},
	} {
		stdout, stderr = syncBuffer{}, syncBuffer{}
		args := append(crawlArgs(filepath.Join(dir, "bad"), origin, bad...), seed)
		if err := run(context.Background(), args, noEnv, &stdout, &stderr); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestCrawlDiscoversRenderedLinks: a rendered seed's links are read from its DOM after
// the render (real headless Chromium): a link only a script writes is followed.
func TestCrawlDiscoversRenderedLinks(t *testing.T) {
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/js":
			fmt.Fprint(w, `<!doctype html><html><body><p>js</p><script>
document.body.insertAdjacentHTML("beforeend", '<a href="/from-script">written by a script</a>');
</script></body></html>`)
		case "/from-script":
			fmt.Fprint(w, `<!doctype html><html><body><p>found in the DOM</p></body></html>`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer origin.Close()
	dir := t.TempDir()
	seed := writeFile(t, `{"url":"http://js.test/js","should_render":true,"min_interval_ms":0}`)
	var stdout, stderr syncBuffer
	args := []string{"crawl", "--data-dir", filepath.Join(dir, "data"), "--connect-to", origin.ConnectTo(),
		"--render-concurrency", "1", "--shutdown-grace-seconds", "5", "--should-read-sitemaps=false",
		"--max-depth", "1", "--output", filepath.Join(dir, "out.jsonl"), seed}
	if err := run(context.Background(), args, noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("crawl: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	if got := pageArrivals(origin); got["js.test/from-script"] == 0 {
		t.Fatalf("the link written by the script was not followed: %v\n%s", got, stdout.String())
	}
	var found map[string]any
	for _, l := range readLines(t, filepath.Join(dir, "out.jsonl")) {
		if l["url"] == "http://js.test/from-script" {
			found = l
		}
	}
	if found == nil || found["state"] != "done" || found["text_length"] == nil {
		t.Errorf("the found page's line: %v", found)
	}
}

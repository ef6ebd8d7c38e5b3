// Package storetest is the one test suite every store backend must pass (embedded, TiKV):
// the contracts of downloader.SettingsStore, downloader.ResultStore and
// downloader.PageStore written down as tests. A backend's test calls Run with a function
// that opens a fresh, empty store.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"downloader"
)

// Stores are the three interfaces of one backend. They may be one value.
type Stores struct {
	Settings downloader.SettingsStore
	Results  downloader.ResultStore
	Pages    downloader.PageStore
}

// The paging contract of ResultStore.FetchResults that every backend follows.
const (
	DefaultLimit = 100  // the limit used when the caller passes 0
	MaxLimit     = 1000 // the largest limit accepted
)

// Run runs the suite. open must return a fresh, empty store each time it is called, and
// release it with t.Cleanup. Subtests do not run in parallel with each other, but several
// of them use the store from many goroutines, so run the suite under -race.
func Run(t *testing.T, open func(t *testing.T) Stores) {
	t.Run("Settings", func(t *testing.T) { testSettings(t, open) })
	t.Run("Results", func(t *testing.T) { testResults(t, open) })
	t.Run("ResultsPaging", func(t *testing.T) { testResultsPaging(t, open) })
	t.Run("ResultsInvalid", func(t *testing.T) { testResultsInvalid(t, open) })
	t.Run("Pages", func(t *testing.T) { testPages(t, open) })
	t.Run("LatestPage", func(t *testing.T) { testLatestPage(t, open) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, open) })
	t.Run("CanceledContext", func(t *testing.T) { testCanceled(t, open) })
}

// base is the fetched_at the fixtures are built around.
var base = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testSettings(t *testing.T, open func(t *testing.T) Stores) {
	st := open(t).Settings
	ctx := t.Context()

	got, ok, err := st.Settings(ctx)
	if err != nil || ok || got != (downloader.Settings{}) {
		t.Fatalf("Settings on an empty store = %+v, %v, %v; want zero, false, nil", got, ok, err)
	}
	for _, want := range []downloader.Settings{{MaxConcurrentCount: 64}, {MaxConcurrentCount: 8}, {}} {
		if err := st.SaveSettings(ctx, want); err != nil {
			t.Fatalf("SaveSettings(%+v): %v", want, err)
		}
		got, ok, err := st.Settings(ctx)
		if err != nil || !ok || got != want {
			t.Fatalf("Settings after SaveSettings(%+v) = %+v, %v, %v", want, got, ok, err)
		}
	}
}

// result builds a distinctive record; its TaskID identifies it in the tests.
func result(i int, domain string, at time.Time) *downloader.FetchResult {
	status := 200 + i%3
	raw := 1000 + i
	hs := &downloader.HealthSignal{ElapsedMs: int64(i), BodyBytes: int64(10 * i), ContentType: "text/html"}
	r := &downloader.FetchResult{
		Summary: downloader.Summary{
			Domain:           domain,
			HTTPStatus:       &status,
			RawTextLength:    &raw,
			HealthSignal:     hs,
			HasReachedOrigin: true,
		},
		TaskID:    fmt.Sprintf("task-%04d", i),
		URL:       fmt.Sprintf("https://%s/page/%d", domain, i),
		Entry:     downloader.EntryLease,
		FetchedAt: at,
	}
	if i%5 == 0 {
		fr := downloader.FailHTTPStatusError
		r.FailReason = &fr
		r.Entry = downloader.EntryRender
		r.FinalURL = r.URL + "?final"
		r.PageKey = strings.Repeat("ab", 32)
	}
	return r
}

// sameResult reports whether two records are equal field by field (compared as JSON, with
// instants in UTC).
func sameResult(t *testing.T, got, want *downloader.FetchResult) bool {
	t.Helper()
	g, w := *got, *want
	g.FetchedAt, w.FetchedAt = g.FetchedAt.UTC(), w.FetchedAt.UTC()
	gj, err1 := json.Marshal(&g)
	wj, err2 := json.Marshal(&w)
	if err1 != nil || err2 != nil {
		t.Fatalf("marshal: %v %v", err1, err2)
	}
	if string(gj) != string(wj) {
		t.Errorf("record differs:\n got %s\nwant %s", gj, wj)
		return false
	}
	return true
}

func put(t *testing.T, rs downloader.ResultStore, r *downloader.FetchResult) {
	t.Helper()
	if err := rs.PutFetchResult(t.Context(), r); err != nil {
		t.Fatalf("PutFetchResult(%s): %v", r.TaskID, err)
	}
}

// walk pages through FetchResults with limit until the end, calling between(page) after
// each page, and checks the page sizes and the final cursor.
func walk(t *testing.T, rs downloader.ResultStore, domain string, limit int, between func(page int)) []downloader.FetchResult {
	t.Helper()
	var all []downloader.FetchResult
	cursor := ""
	for page := 0; ; page++ {
		if page > 10000 {
			t.Fatal("FetchResults never returned an empty cursor")
		}
		got, next, err := rs.FetchResults(t.Context(), domain, limit, cursor)
		if err != nil {
			t.Fatalf("FetchResults(%q, %d, %q): %v", domain, limit, cursor, err)
		}
		all = append(all, got...)
		if next == "" {
			if len(got) > limit {
				t.Fatalf("last page has %d records, limit %d", len(got), limit)
			}
			return all
		}
		if len(got) != limit {
			t.Fatalf("page %d has %d records, limit %d, and a cursor follows", page, len(got), limit)
		}
		if between != nil {
			between(page)
		}
		cursor = next
	}
}

func taskIDs(rs []downloader.FetchResult) []string {
	ids := make([]string, len(rs))
	for i := range rs {
		ids[i] = rs[i].TaskID
	}
	return ids
}

// checkOrder fails unless rs are newest first (ties allowed) and have no duplicates.
func checkOrder(t *testing.T, rs []downloader.FetchResult) {
	t.Helper()
	seen := make(map[string]bool, len(rs))
	for i := range rs {
		if seen[rs[i].TaskID] {
			t.Errorf("record %s listed twice", rs[i].TaskID)
		}
		seen[rs[i].TaskID] = true
		if i > 0 && rs[i].FetchedAt.After(rs[i-1].FetchedAt) {
			t.Errorf("record %s (%s) listed after older %s (%s)", rs[i].TaskID, rs[i].FetchedAt, rs[i-1].TaskID, rs[i-1].FetchedAt)
		}
	}
}

func testResults(t *testing.T, open func(t *testing.T) Stores) {
	rs := open(t).Results
	ctx := t.Context()

	got, next, err := rs.FetchResults(ctx, "", 0, "")
	if err != nil || len(got) != 0 || next != "" {
		t.Fatalf("FetchResults on an empty store = %d records, %q, %v; want none", len(got), next, err)
	}

	// 105 records over three domains (a.example 35, b.example 35, c.example 35), put in a
	// shuffled order; i-th is fetched at base+i s. Plus one record with no domain.
	domains := []string{"a.example", "b.example", "c.example"}
	want := make(map[string]*downloader.FetchResult)
	order := rand.New(rand.NewPCG(1, 2)).Perm(105)
	for _, i := range order {
		r := result(i, domains[i%3], base.Add(time.Duration(i)*time.Second))
		want[r.TaskID] = r
		put(t, rs, r)
	}
	r := result(200, "", base.Add(-time.Hour))
	want[r.TaskID] = r
	put(t, rs, r)

	t.Run("NewestFirst", func(t *testing.T) {
		got, next, err := rs.FetchResults(ctx, "", MaxLimit, "")
		if err != nil || next != "" || len(got) != 106 {
			t.Fatalf("FetchResults(all) = %d records, %q, %v; want 106 and no cursor", len(got), next, err)
		}
		for k := range got {
			wantID := fmt.Sprintf("task-%04d", 104-k)
			if k == 105 {
				wantID = "task-0200"
			}
			if got[k].TaskID != wantID {
				t.Fatalf("record %d is %s, want %s", k, got[k].TaskID, wantID)
			}
			sameResult(t, &got[k], want[wantID])
		}
	})

	t.Run("Domain", func(t *testing.T) {
		for _, d := range domains {
			got := walk(t, rs, d, 7, nil) // 35 records: exactly five full pages
			if len(got) != 35 {
				t.Fatalf("domain %s: %d records, want 35", d, len(got))
			}
			checkOrder(t, got)
			for k := range got {
				if got[k].Domain != d {
					t.Fatalf("domain %s: got a record of %s", d, got[k].Domain)
				}
			}
		}
		got, next, err := rs.FetchResults(ctx, "unknown.example", 10, "")
		if err != nil || len(got) != 0 || next != "" {
			t.Fatalf("unknown domain = %d records, %q, %v; want none", len(got), next, err)
		}
		// A domain that is a prefix of another must not match it.
		got, _, err = rs.FetchResults(ctx, "a.exam", 10, "")
		if err != nil || len(got) != 0 {
			t.Fatalf("domain a.exam = %d records, %v; want none", len(got), err)
		}
	})

	t.Run("Limits", func(t *testing.T) {
		for _, tc := range []struct {
			limit      int
			wantCount  int
			wantCursor bool
		}{
			{0, DefaultLimit, true},
			{1, 1, true},
			{105, 105, true},
			{106, 106, false},
			{107, 106, false},
			{MaxLimit, 106, false},
		} {
			got, next, err := rs.FetchResults(ctx, "", tc.limit, "")
			if err != nil || len(got) != tc.wantCount || (next != "") != tc.wantCursor {
				t.Errorf("limit %d: %d records, cursor %q, %v; want %d records, cursor %v",
					tc.limit, len(got), next, err, tc.wantCount, tc.wantCursor)
			}
		}
		for _, limit := range []int{-1, MaxLimit + 1, 1 << 40} {
			_, _, err := rs.FetchResults(ctx, "", limit, "")
			if downloader.ErrorCode(err) != downloader.EINVALID || downloader.ErrorField(err) != "limit" {
				t.Errorf("limit %d: err %v; want EINVALID on field limit", limit, err)
			}
		}
	})

	t.Run("DomainIPv6", func(t *testing.T) {
		// IPv6 literals are domains too, and contain the key separator.
		s := open(t).Results
		put(t, s, result(1, "::1", base))
		put(t, s, result(2, "::1:2", base))
		put(t, s, result(3, "::", base))
		for d, wantID := range map[string]string{"::1": "task-0001", "::1:2": "task-0002", "::": "task-0003"} {
			got, _, err := s.FetchResults(ctx, d, 10, "")
			if err != nil || len(got) != 1 || got[0].TaskID != wantID {
				t.Errorf("domain %s = %v, %v; want [%s]", d, taskIDs(got), err, wantID)
			}
		}
	})
}

func testResultsPaging(t *testing.T, open func(t *testing.T) Stores) {
	rs := open(t).Results
	const n = 90
	initial := make(map[string]bool)
	// Pairs of records share fetched_at, so the order must break ties consistently.
	for i := range n {
		d := "a.example"
		if i%2 == 1 {
			d = "b.example"
		}
		r := result(i, d, base.Add(time.Duration(i/2)*time.Millisecond))
		initial[r.TaskID] = true
		put(t, rs, r)
	}
	extra := 1000
	appendSome := func(page int) {
		// Newer, older, and tied with an existing record, on both domains.
		for _, at := range []time.Time{
			base.Add(time.Hour), base.Add(-time.Hour), base.Add(time.Duration(page*3) * time.Millisecond),
		} {
			for _, d := range []string{"a.example", "b.example"} {
				put(t, rs, result(extra, d, at))
				extra++
			}
		}
	}
	for _, tc := range []struct {
		domain string
		limit  int
	}{{"", 7}, {"", 1}, {"a.example", 4}, {"b.example", 45}} {
		t.Run(fmt.Sprintf("domain=%q,limit=%d", tc.domain, tc.limit), func(t *testing.T) {
			want := make(map[string]bool)
			got, _, err := rs.FetchResults(t.Context(), tc.domain, MaxLimit, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range got {
				want[r.TaskID] = true
			}
			var between func(int)
			if tc.limit > 1 {
				between = appendSome
			}
			walked := walk(t, rs, tc.domain, tc.limit, between)
			checkOrder(t, walked)
			seen := make(map[string]bool)
			for _, r := range walked {
				seen[r.TaskID] = true
				if tc.domain != "" && r.Domain != tc.domain {
					t.Errorf("record %s of %s in a walk of %s", r.TaskID, r.Domain, tc.domain)
				}
			}
			for id := range want {
				if !seen[id] {
					t.Errorf("record %s, present before the walk, was skipped", id)
				}
			}
		})
	}
	if len(initial) != n {
		t.Fatalf("fixture has %d records", len(initial))
	}
}

func testResultsInvalid(t *testing.T, open func(t *testing.T) Stores) {
	rs := open(t).Results
	ctx := t.Context()
	for i := range 3 {
		put(t, rs, result(i, "a.example", base.Add(time.Duration(i)*time.Second)))
	}
	_, cursor, err := rs.FetchResults(ctx, "", 1, "")
	if err != nil || cursor == "" {
		t.Fatalf("FetchResults = %q, %v", cursor, err)
	}
	for _, c := range []string{
		"x", "not-a-cursor", " ", "../../etc", strings.Repeat("z", 32), strings.Repeat("a", 10000),
		cursor + "x", "\x00", strings.ToUpper(cursor) + "!",
	} {
		for _, d := range []string{"", "a.example"} {
			_, _, err := rs.FetchResults(ctx, d, 10, c)
			if downloader.ErrorCode(err) != downloader.EINVALID || downloader.ErrorField(err) != "cursor" {
				t.Errorf("cursor %.40q, domain %q: err %v; want EINVALID on field cursor", c, d, err)
			}
		}
	}

	if err := rs.PutFetchResult(ctx, nil); downloader.ErrorCode(err) != downloader.EINVALID {
		t.Errorf("PutFetchResult(nil) = %v; want EINVALID", err)
	}
	r := result(9, "a.example", time.Time{})
	if err := rs.PutFetchResult(ctx, r); downloader.ErrorCode(err) != downloader.EINVALID || downloader.ErrorField(err) != "fetched_at" {
		t.Errorf("PutFetchResult without fetched_at = %v; want EINVALID on field fetched_at", err)
	}
	got, _, err := rs.FetchResults(ctx, "", 10, "")
	if err != nil || len(got) != 3 {
		t.Errorf("after refused writes: %d records, %v; want 3", len(got), err)
	}
}

func pageKey(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

func checkPage(t *testing.T, ps downloader.PageStore, key string, want *downloader.Page) {
	t.Helper()
	got, err := ps.Page(t.Context(), key)
	if err != nil {
		t.Fatalf("Page(%s): %v", key, err)
	}
	if got.PageKey != key || got.URL != want.URL || got.FinalURL != want.FinalURL ||
		got.ContentType != want.ContentType || !got.FetchedAt.Equal(want.FetchedAt) {
		t.Errorf("Page(%s) = {%s %s %s %s %s}; want {%s %s %s %s %s}", key,
			got.PageKey, got.URL, got.FinalURL, got.ContentType, got.FetchedAt,
			key, want.URL, want.FinalURL, want.ContentType, want.FetchedAt)
	}
	if !reflect.DeepEqual(got.ResponseHeaders, want.ResponseHeaders) {
		t.Errorf("Page(%s): response_headers %v; want %v", key, got.ResponseHeaders, want.ResponseHeaders)
	}
	if string(got.Body) != string(want.Body) {
		t.Errorf("Page(%s): body of %d bytes differs from the %d stored", key, len(got.Body), len(want.Body))
	}
}

func testPages(t *testing.T, open func(t *testing.T) Stores) {
	ps := open(t).Pages
	ctx := t.Context()

	page := func(url string, body []byte) *downloader.Page {
		return &downloader.Page{
			URL: url, FinalURL: url + "/final", ContentType: "text/html; charset=utf-8",
			FetchedAt: base, Body: body,
		}
	}

	t.Run("RoundTrip", func(t *testing.T) {
		p := page("https://a.example/", []byte("<html><body>你好, world</body></html>"))
		p.ResponseHeaders = map[string][]string{"Etag": {`"v1"`}, "Last-Modified": {"Tue, 01 Dec 2026 10:00:00 GMT"},
			"Set-Cookie": {"a=1", "b=2"}, "Content-Type": {"text/html; charset=utf-8"}}
		key, err := ps.PutPage(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if key != pageKey(p.Body) {
			t.Fatalf("key %q; want the hex SHA-256 of the body, %s", key, pageKey(p.Body))
		}
		checkPage(t, ps, key, p)
	})

	t.Run("Dedup", func(t *testing.T) {
		body := []byte("<html>the same body</html>")
		first := page("https://a.example/first", body)
		k1, err := ps.PutPage(ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		second := page("https://b.example/second", body)
		second.FetchedAt = base.Add(time.Hour)
		k2, err := ps.PutPage(ctx, second)
		if err != nil {
			t.Fatal(err)
		}
		if k1 != k2 {
			t.Fatalf("same body, keys %s and %s", k1, k2)
		}
		// Stored once: the second put did not overwrite the first.
		checkPage(t, ps, k1, first)
		k3, err := ps.PutPage(ctx, page("https://a.example/first", []byte("<html>another body</html>")))
		if err != nil {
			t.Fatal(err)
		}
		if k3 == k1 {
			t.Fatal("different bodies got the same key")
		}
	})

	t.Run("EmptyBody", func(t *testing.T) {
		p := page("https://a.example/empty", nil)
		key, err := ps.PutPage(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if key != pageKey(nil) {
			t.Fatalf("key %q; want %s", key, pageKey(nil))
		}
		checkPage(t, ps, key, p)
	})

	t.Run("Large", func(t *testing.T) {
		// 5 MiB: half incompressible, half repetitive HTML.
		body := make([]byte, 0, 5<<20)
		rng := rand.NewChaCha8([32]byte{1})
		noise := make([]byte, 5<<19)
		_, _ = rng.Read(noise)
		body = append(body, noise...)
		for len(body) < 5<<20 {
			body = append(body, "<div class=\"row\"><a href=\"/x\">链接</a></div>\n"...)
		}
		body = body[:5<<20]
		p := page("https://a.example/large", body)
		key, err := ps.PutPage(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if key != pageKey(body) {
			t.Fatalf("key %q; want %s", key, pageKey(body))
		}
		checkPage(t, ps, key, p)
	})

	t.Run("NotFound", func(t *testing.T) {
		for _, key := range []string{
			pageKey([]byte("never stored")), "", "nope", strings.Repeat("Z", 64),
			strings.ToUpper(pageKey([]byte("<html>the same body</html>"))), "../../etc/passwd",
		} {
			p, err := ps.Page(ctx, key)
			if downloader.ErrorCode(err) != downloader.ENOTFOUND || p != nil {
				t.Errorf("Page(%.70q) = %v, %v; want ENOTFOUND", key, p, err)
			}
		}
	})

	t.Run("Nil", func(t *testing.T) {
		if _, err := ps.PutPage(ctx, nil); downloader.ErrorCode(err) != downloader.EINVALID {
			t.Errorf("PutPage(nil) = %v; want EINVALID", err)
		}
	})
}

// testConcurrent writes results, pages and settings from many goroutines at once, reading
// in between, then checks that every write is there exactly once.
func testConcurrent(t *testing.T, open func(t *testing.T) Stores) {
	s := open(t)
	ctx := t.Context()
	const writers, perWriter = 8, 15
	shared := [][]byte{[]byte("<html>shared 0</html>"), []byte("<html>shared 1</html>"), []byte("<html>shared 2</html>")}

	var wg sync.WaitGroup
	keys := make([][]string, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				n := w*perWriter + i
				// Several writers use the same fetched_at, to contend on ties.
				r := result(n, fmt.Sprintf("d%d.example", w%3), base.Add(time.Duration(i)*time.Millisecond))
				if err := s.Results.PutFetchResult(ctx, r); err != nil {
					t.Errorf("PutFetchResult: %v", err)
					return
				}
				if i%3 == 0 {
					body := shared[i/3%len(shared)]
					if i%2 == 1 {
						body = fmt.Appendf(nil, "<html>writer %d item %d</html>", w, i)
					}
					key, err := s.Pages.PutPage(ctx, &downloader.Page{URL: r.URL, FetchedAt: base, Body: body})
					if err != nil {
						t.Errorf("PutPage: %v", err)
						return
					}
					if key != pageKey(body) {
						t.Errorf("PutPage key %s; want %s", key, pageKey(body))
					}
					keys[w] = append(keys[w], key)
				}
				if i%5 == 0 {
					if err := s.Settings.SaveSettings(ctx, downloader.Settings{MaxConcurrentCount: w + 1}); err != nil {
						t.Errorf("SaveSettings: %v", err)
					}
					if _, _, err := s.Settings.Settings(ctx); err != nil {
						t.Errorf("Settings: %v", err)
					}
					if _, _, err := s.Results.FetchResults(ctx, "", 10, ""); err != nil {
						t.Errorf("FetchResults: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	all := walk(t, s.Results, "", 17, nil)
	checkOrder(t, all)
	if len(all) != writers*perWriter {
		t.Errorf("%d records; want %d", len(all), writers*perWriter)
	}
	perDomain := 0
	for d := range 3 {
		perDomain += len(walk(t, s.Results, fmt.Sprintf("d%d.example", d), 9, nil))
	}
	if perDomain != writers*perWriter {
		t.Errorf("%d records over the three domains; want %d", perDomain, writers*perWriter)
	}
	for _, ks := range keys {
		for _, k := range ks {
			p, err := s.Pages.Page(ctx, k)
			if err != nil || pageKey(p.Body) != k {
				t.Errorf("Page(%s) = %v", k, err)
			}
		}
	}
	st, ok, err := s.Settings.Settings(ctx)
	if err != nil || !ok || st.MaxConcurrentCount < 1 || st.MaxConcurrentCount > writers {
		t.Errorf("Settings = %+v, %v, %v; want one of the saved values", st, ok, err)
	}
}

func testCanceled(t *testing.T, open func(t *testing.T) Stores) {
	s := open(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	errs := map[string]error{}
	_, _, errs["Settings"] = s.Settings.Settings(ctx)
	errs["SaveSettings"] = s.Settings.SaveSettings(ctx, downloader.Settings{MaxConcurrentCount: 1})
	errs["PutFetchResult"] = s.Results.PutFetchResult(ctx, result(1, "a.example", base))
	_, _, errs["FetchResults"] = s.Results.FetchResults(ctx, "", 10, "")
	_, errs["PutPage"] = s.Pages.PutPage(ctx, &downloader.Page{Body: []byte("x")})
	_, errs["Page"] = s.Pages.Page(ctx, pageKey([]byte("x")))
	names := make([]string, 0, len(errs))
	for name := range errs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if errs[name] == nil {
			t.Errorf("%s with a canceled context returned no error", name)
		}
	}
	// Nothing was written.
	bg := context.WithoutCancel(ctx)
	if _, ok, err := s.Settings.Settings(bg); err != nil || ok {
		t.Errorf("settings were saved under a canceled context (%v, %v)", ok, err)
	}
	if got, _, err := s.Results.FetchResults(bg, "", 10, ""); err != nil || len(got) != 0 {
		t.Errorf("results were written under a canceled context (%d, %v)", len(got), err)
	}
}

// testLatestPage: the URL index of conditional requests. A page stored with validators is
// its URL's latest; a later page without validators removes the entry (its validators must
// not be sent for another page); other URLs are apart.
func testLatestPage(t *testing.T, open func(t *testing.T) Stores) {
	ps := open(t).Pages
	ctx := context.Background()
	const u = "http://a.test/page"
	if _, ok, err := ps.LatestPage(ctx, u); err != nil || ok {
		t.Fatalf("empty store: ok %v, err %v", ok, err)
	}
	v1 := downloader.Validators{Etag: `"v1"`, LastModified: "Tue, 01 Dec 2026 10:00:00 GMT"}
	k1, err := ps.PutPage(ctx, &downloader.Page{URL: u, ContentType: "text/html", FetchedAt: time.Now().UTC(), Body: []byte("<p>one</p>"), Validators: v1})
	if err != nil {
		t.Fatal(err)
	}
	ref, ok, err := ps.LatestPage(ctx, u)
	if err != nil || !ok || ref.PageKey != k1 || ref.Validators != v1 {
		t.Fatalf("after a page with validators: %+v %v %v, want key %s and %+v", ref, ok, err, k1, v1)
	}
	if _, ok, _ := ps.LatestPage(ctx, u+"?other"); ok {
		t.Errorf("another URL has an entry")
	}
	v2 := downloader.Validators{Etag: `W/"v2"`}
	k2, err := ps.PutPage(ctx, &downloader.Page{URL: u, ContentType: "text/html", FetchedAt: time.Now().UTC(), Body: []byte("<p>two</p>"), Validators: v2})
	if err != nil {
		t.Fatal(err)
	}
	if ref, ok, _ := ps.LatestPage(ctx, u); !ok || ref.PageKey != k2 || ref.Validators != v2 {
		t.Errorf("after a newer page: %+v %v, want key %s and %+v", ref, ok, k2, v2)
	}
	// The same body as before, stored again under the same URL with new validators.
	v3 := downloader.Validators{Etag: `"v3"`}
	if _, err := ps.PutPage(ctx, &downloader.Page{URL: u, ContentType: "text/html", FetchedAt: time.Now().UTC(), Body: []byte("<p>one</p>"), Validators: v3}); err != nil {
		t.Fatal(err)
	}
	if ref, ok, _ := ps.LatestPage(ctx, u); !ok || ref.PageKey != k1 || ref.Validators != v3 {
		t.Errorf("after a repeated body: %+v %v, want key %s and %+v", ref, ok, k1, v3)
	}
	if _, err := ps.PutPage(ctx, &downloader.Page{URL: u, ContentType: "text/html", FetchedAt: time.Now().UTC(), Body: []byte("<p>three</p>")}); err != nil {
		t.Fatal(err)
	}
	if ref, ok, err := ps.LatestPage(ctx, u); err != nil || ok {
		t.Errorf("after a page without validators: %+v %v %v, want none", ref, ok, err)
	}
}

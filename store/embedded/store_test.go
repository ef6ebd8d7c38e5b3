package embedded

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/goleak"

	"downloader"
	"downloader/store/pagevalue"
	"downloader/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func openTest(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Stores {
		s := openTest(t, t.TempDir())
		return storetest.Stores{Settings: s, Results: s, Pages: s}
	})
}

// TestReopen closes the store and opens it again: every acknowledged write is still there,
// and new records still list first.
func TestReopen(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	if err := s.SaveSettings(ctx, downloader.Settings{MaxConcurrentCount: 33}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		r := &downloader.FetchResult{Summary: downloader.Summary{Domain: "a.example"},
			TaskID: fmt.Sprintf("t%d", i), URL: "https://a.example/", FetchedAt: at}
		if err := s.PutFetchResult(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	body := bytes.Repeat([]byte("<p>persist</p>"), 1000)
	key, err := s.PutPage(ctx, &downloader.Page{URL: "https://a.example/", Body: body, FetchedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := s.Settings(ctx); downloader.ErrorCode(err) != downloader.EUNAVAILABLE {
		t.Fatalf("Settings after Close = %v; want EUNAVAILABLE", err)
	}

	s = openTest(t, dir)
	st, ok, err := s.Settings(ctx)
	if err != nil || !ok || st.MaxConcurrentCount != 33 {
		t.Fatalf("settings after reopen = %+v, %v, %v", st, ok, err)
	}
	// Same fetched_at after the restart: the new record must still list first (the
	// sequence continues above the previous run's).
	r := &downloader.FetchResult{Summary: downloader.Summary{Domain: "a.example"},
		TaskID: "after", URL: "https://a.example/", FetchedAt: at}
	if err := s.PutFetchResult(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, next, err := s.FetchResults(ctx, "a.example", 10, "")
	if err != nil || next != "" {
		t.Fatalf("FetchResults after reopen: %q, %v", next, err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.TaskID)
	}
	if want := "after t4 t3 t2 t1 t0"; strings.Join(ids, " ") != want {
		t.Fatalf("records after reopen: %v; want %s", ids, want)
	}
	p, err := s.Page(ctx, key)
	if err != nil || !bytes.Equal(p.Body, body) {
		t.Fatalf("page after reopen: %v", err)
	}
	if _, err := s.PutPage(ctx, &downloader.Page{Body: body}); err != nil {
		t.Fatal(err)
	}
	if n := s.pageWriteCount.Load(); n != 0 {
		t.Fatalf("a body stored before the restart was written again (%d writes)", n)
	}
}

// TestOpenTwice: one directory, one process. The second Open fails instead of corrupting.
func TestOpenTwice(t *testing.T) {
	dir := t.TempDir()
	openTest(t, dir)
	if s, err := Open(dir, nil); err == nil {
		_ = s.Close()
		t.Fatal("second Open of the same directory succeeded")
	}
}

// TestPageWrittenOnce stores one body from many goroutines at once: one write.
func TestPageWrittenOnce(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := t.Context()
	body := []byte("<html>dedup</html>")
	keys := make(chan string, 16)
	for i := range cap(keys) {
		go func() {
			k, err := s.PutPage(ctx, &downloader.Page{URL: fmt.Sprintf("https://a.example/%d", i), Body: body})
			if err != nil {
				t.Errorf("PutPage: %v", err)
			}
			keys <- k
		}()
	}
	first := <-keys
	for range cap(keys) - 1 {
		if k := <-keys; k != first {
			t.Fatalf("keys %s and %s for one body", first, k)
		}
	}
	if n := s.pageWriteCount.Load(); n != 1 {
		t.Fatalf("%d writes for one body; want 1", n)
	}
}

// TestKeyLayout checks that every key in the database has one of the prefixes the package
// documentation lists, in the documented shape.
func TestKeyLayout(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := t.Context()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	if err := s.SaveSettings(ctx, downloader.Settings{MaxConcurrentCount: 4}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a.example", "::1", "", "100%:x"} {
		r := &downloader.FetchResult{Summary: downloader.Summary{Domain: d}, URL: "https://x/", FetchedAt: at}
		if err := s.PutFetchResult(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PutPage(ctx, &downloader.Page{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	iter, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		keys = append(keys, string(iter.Key()))
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	id := `[0-9a-f]{32}`
	patterns := []string{
		`downloader:fetch_result:id:` + id,
		`downloader:fetch_result:domain:(a\.example|%3A%3A1|100%25%3Ax):` + id,
		`config:downloader:global`,
		`page:content:[0-9a-f]{64}`,
	}
	counts := make([]int, len(patterns))
	for _, k := range keys {
		matched := false
		for i, p := range patterns {
			if regexpMatch(t, p, k) {
				counts[i]++
				matched = true
			}
		}
		if !matched {
			t.Errorf("key %q matches no documented prefix", k)
		}
	}
	if want := []int{4, 3, 1, 1}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("key counts per prefix %v; want %v (keys %q)", counts, want, keys)
	}
}

// EscapeDomain, PrefixEnd and ValidID are tested in package keys, which they live in.

func TestIDOrder(t *testing.T) {
	s := &Store{}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	older := s.nextID(at)
	tieFirst := s.nextID(at.Add(time.Nanosecond))
	tieSecond := s.nextID(at.Add(time.Nanosecond))
	newest := s.nextID(at.Add(time.Hour))
	if !(newest < tieSecond && tieSecond < tieFirst && tieFirst < older) {
		t.Fatalf("ids out of order: %s %s %s %s", newest, tieSecond, tieFirst, older)
	}
}

// TestCorruptPage: a page whose stored bytes do not decode is an internal error, not a
// wrong body.
func TestCorruptPage(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	key, err := s.PutPage(ctx, &downloader.Page{Body: []byte("<html>ok</html>")})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string][]byte{
		"empty":       {},
		"format":      {9, 0},
		"chunked":     append([]byte{pagevalue.Chunked, 2}, "{}"...), // never written here
		"meta length": {pagevalue.Inline, 200},
		"meta":        append([]byte{pagevalue.Inline, 2}, "{x"...),
		"body":        append([]byte{pagevalue.Inline, 2}, "{}garbage"...),
	} {
		if err := s.db.Set([]byte(pagePrefix+key), v, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Page(ctx, key); downloader.ErrorCode(err) != downloader.EINTERNAL {
			t.Errorf("%s: Page = %v; want an internal error", name, err)
		}
	}
}

func regexpMatch(t *testing.T, pattern, s string) bool {
	t.Helper()
	return regexp.MustCompile(`^` + pattern + `$`).MatchString(s)
}

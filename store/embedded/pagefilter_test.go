package embedded

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"testing"

	"downloader"
)

// TestPageFilter checks that the page filter keeps PutPage's deduplication exact: a
// duplicate body is not written again (the first page's metadata stays), a new body is
// written without a lookup, across a restart (the filter rebuilt from the store), a
// filter that fills up (rebuilt bigger) and one that says "maybe" for everything (every
// body looked up, as without a filter).
func TestPageFilter(t *testing.T) {
	// saturated is a filter whose every bit is set: nothing skips the lookup.
	saturated := func() *pageFilter {
		f := newPageFilter(0)
		for i := range f.bits {
			f.bits[i] = ^uint64(0)
		}
		return f
	}
	// tiny is a filter full after two more keys: the third PutPage rebuilds it.
	tiny := func() *pageFilter { return &pageFilter{bits: make([]uint64, 1), mask: 63, limit: 2} }
	cases := []struct {
		name string
		// before are the bodies stored before the store is reopened (nil: no reopen).
		before []string
		filter func() *pageFilter // set after the reopen (nil: built by the first PutPage)
		bodies []string           // then stored, in order
		// wantWrites counts the pages written after the reopen, wantSkips the lookups
		// skipped, wantBuilds the filter builds.
		wantWrites, wantSkips int64
		wantBuilds            int
	}{
		{name: "new bodies skip the lookup", bodies: []string{"a", "b", "c"},
			wantWrites: 3, wantSkips: 3, wantBuilds: 1},
		{name: "a duplicate body is deduplicated", bodies: []string{"a", "b", "a", "b", "a"},
			wantWrites: 2, wantSkips: 2, wantBuilds: 1},
		{name: "after a restart, stored bodies are found", before: []string{"a", "b"}, bodies: []string{"a", "c", "b", "c"},
			wantWrites: 1, wantSkips: 1, wantBuilds: 1},
		{name: "a full filter is rebuilt", before: []string{"a"}, filter: tiny, bodies: []string{"b", "c", "a", "d", "b"},
			wantWrites: 3, wantSkips: 3, wantBuilds: 1},
		{name: "false positives fall back to the lookup", before: []string{"a"}, filter: saturated, bodies: []string{"a", "b", "c", "b"},
			wantWrites: 2, wantSkips: 0, wantBuilds: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx := t.Context()
			meta := map[string]string{} // key → the URL of the first page stored with it
			put := func(s *Store, i int, body string) {
				t.Helper()
				u := fmt.Sprintf("https://a.example/%d/%s", i, body)
				key, err := s.PutPage(ctx, &downloader.Page{URL: u, Body: []byte(body)})
				if err != nil {
					t.Fatalf("PutPage(%q): %v", body, err)
				}
				if sum := sha256.Sum256([]byte(body)); key != fmt.Sprintf("%x", sum) {
					t.Fatalf("PutPage(%q) = %s, want its SHA-256", body, key)
				}
				if _, ok := meta[key]; !ok {
					meta[key] = u
				}
			}
			if tc.before != nil {
				s, err := Open(dir, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				for i, b := range tc.before {
					put(s, -1-i, b)
				}
				if err := s.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
			}
			s := openTest(t, dir)
			if tc.filter != nil {
				s.pageFilter = tc.filter()
			}
			for i, b := range tc.bodies {
				put(s, i, b)
			}
			if n := s.pageWriteCount.Load(); n != tc.wantWrites {
				t.Errorf("%d pages written, want %d", n, tc.wantWrites)
			}
			if n := s.pageLookupSkipCount.Load(); n != tc.wantSkips {
				t.Errorf("%d lookups skipped, want %d", n, tc.wantSkips)
			}
			if s.pageFilterBuildCount != tc.wantBuilds {
				t.Errorf("%d filter builds, want %d", s.pageFilterBuildCount, tc.wantBuilds)
			}
			for key, u := range meta {
				p, err := s.Page(ctx, key)
				if err != nil {
					t.Fatalf("Page(%s): %v", key, err)
				}
				if p.URL != u {
					t.Errorf("page %s has url %q, want the first one stored, %q", key, p.URL, u)
				}
			}
		})
	}
}

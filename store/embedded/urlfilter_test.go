package embedded

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
)

// TestURLFilter: LatestPage answers a URL never indexed without reading, and finds every
// URL indexed, whichever way its entry was written (PutPage, a task's end), before and
// after a reopen (the filter built from the stored index); an entry deleted stays a
// "maybe", read and found absent.
func TestURLFilter(t *testing.T) {
	v := downloader.Validators{Etag: `"e1"`}
	type step struct {
		op   string // put (PutPage), end (a task's end), get (LatestPage), reopen
		url  string
		body string
		val  downloader.Validators
		// for get: whether a page is found, and whether the read was skipped
		wantFound, wantSkipped bool
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{name: "never indexed: no read", steps: []step{
			{op: "get", url: "http://a.test/1", wantSkipped: true},
			{op: "put", url: "http://a.test/2", body: "b2"}, // no validators: no entry
			{op: "get", url: "http://a.test/2", wantSkipped: true},
		}},
		{name: "indexed by PutPage, found before and after a reopen", steps: []step{
			{op: "put", url: "http://a.test/1", body: "b1", val: v},
			{op: "get", url: "http://a.test/1", wantFound: true},
			{op: "reopen"},
			{op: "get", url: "http://a.test/1", wantFound: true},
			{op: "get", url: "http://a.test/9", wantSkipped: true},
		}},
		{name: "indexed by a task's end, found after a reopen", steps: []step{
			{op: "end", url: "http://a.test/1", body: "b1", val: v},
			{op: "get", url: "http://a.test/1", wantFound: true},
			{op: "reopen"},
			{op: "get", url: "http://a.test/1", wantFound: true},
		}},
		{name: "unindexed by a page without validators: read, not found", steps: []step{
			{op: "put", url: "http://a.test/1", body: "b1", val: v},
			{op: "put", url: "http://a.test/1", body: "b2"},
			{op: "get", url: "http://a.test/1"},
			{op: "reopen"},
			{op: "get", url: "http://a.test/1", wantSkipped: true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			open := func() *Store {
				s, err := Open(dir, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			s := open()
			defer func() { _ = s.Close() }()
			at := time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC)
			for i, st := range tc.steps {
				p := &downloader.Page{URL: st.url, ContentType: "text/html", FetchedAt: at, Body: []byte(st.body), Validators: st.val}
				switch st.op {
				case "put":
					if _, err := s.PutPage(t.Context(), p); err != nil {
						t.Fatal(err)
					}
				case "end":
					b := s.db.NewBatch()
					done, err := s.stageTaskEnd(t.Context(), b, &downloader.TaskEnd{Report: &downloader.Report{TaskID: "t"}, Page: p})
					if err == nil {
						err = b.Commit(pebble.Sync)
						done(err)
					}
					b.Close()
					if err != nil {
						t.Fatal(err)
					}
				case "reopen":
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					s = open()
				case "get":
					before := s.urlLookupSkipCount.Load()
					_, found, err := s.LatestPage(t.Context(), st.url)
					skipped := s.urlLookupSkipCount.Load() > before
					if err != nil || found != st.wantFound || skipped != st.wantSkipped {
						t.Fatalf("step %d: LatestPage(%s) found %v, skipped the read %v, %v; want found %v, skipped %v",
							i, st.url, found, skipped, err, st.wantFound, st.wantSkipped)
					}
				}
			}
		})
	}
}

// TestURLFilterGrows: past a filter's load a new one, twice its size, takes the new URLs
// and every URL added stays a "maybe"; past the bound in all the filter is off ("maybe"
// for every URL).
func TestURLFilterGrows(t *testing.T) {
	f := &urlFilter{filters: []*pageFilter{{bits: make([]uint64, 1), mask: 63, limit: 2}}, bits: 64}
	var urls []string
	for i := range 40 {
		u := fmt.Sprintf("http://a.test/%d", i)
		f.add(u)
		urls = append(urls, u)
	}
	if len(f.filters) < 2 {
		t.Fatalf("%d filters after 40 URLs into one of 2", len(f.filters))
	}
	for _, u := range urls {
		if !f.mayHave(u) {
			t.Fatalf("%s added, then said absent", u)
		}
	}
	f.bits = pageFilterMaxBits // the next new filter would pass the bound
	f.filters[len(f.filters)-1].count = f.filters[len(f.filters)-1].limit
	f.add("http://b.test/")
	if !f.isOff || !f.mayHave("http://c.test/never") {
		t.Fatalf("past the bound: off %v, a URL never added said absent", f.isOff)
	}
}

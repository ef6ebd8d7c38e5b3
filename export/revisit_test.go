package export

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"downloader"
	"downloader/store/embedded"
)

// TestExportRevisit: the same body fetched under two URLs (one page in the store, kept
// with the first URL's metadata) is one response record and one revisit record of the
// identical-payload-digest profile that names it; each record carries its own task's URL
// and time, and the JSON lines each their own final_url.
func TestExportRevisit(t *testing.T) {
	ctx := t.Context()
	st, err := embedded.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	at1 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	at2 := at1.Add(time.Minute)
	body := []byte("<!doctype html><p>the same page under two URLs</p>")
	k1, err := st.PutPage(ctx, &downloader.Page{URL: "http://a.test/one", FinalURL: "http://a.test/one", ContentType: "text/html", FetchedAt: at1, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	k2, err := st.PutPage(ctx, &downloader.Page{URL: "http://a.test/two", FinalURL: "http://a.test/two", ContentType: "text/html", FetchedAt: at2, Body: body})
	if err != nil || k2 != k1 {
		t.Fatalf("second put: %q %v, want the same key %q", k2, err, k1)
	}
	s200 := 200
	task := func(id, u string, at time.Time) Task {
		return Task{Status: downloader.TaskStatus{TaskID: id, URL: u, Domain: "a.test", State: downloader.TaskDone, AttemptCount: 1},
			Report: &downloader.Report{TaskID: id, FetchedAt: at, PageKey: k1, Summary: downloader.Summary{Domain: "a.test", HTTPStatus: &s200, HasReachedOrigin: true}}}
	}
	tasks := []Task{task("1", "http://a.test/one", at1), task("2", "http://a.test/two", at2)}
	source := func(_ context.Context, f func(*Task) bool) error {
		for i := range tasks {
			if !f(&tasks[i]) {
				return nil
			}
		}
		return nil
	}
	var lines, warc bytes.Buffer
	ww, err := NewWARCWriter(&warc, true, "crawl.warc.gz", "downloader test", "downloader/1.0", at1)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := Export(ctx, source, Options{Lines: &lines, WARC: ww, Pages: st})
	if err != nil {
		t.Fatal(err)
	}
	if stats.PageCount != 2 || stats.RevisitCount != 1 {
		t.Errorf("stats %+v, want 2 pages, 1 revisit", stats)
	}
	recs := readWARC(t, warc.Bytes(), true)
	var resp, rev *warcRecord
	for i := range recs {
		switch recs[i].header["warc-type"] {
		case "response":
			resp = &recs[i]
		case "revisit":
			rev = &recs[i]
		}
	}
	if resp == nil || rev == nil {
		t.Fatalf("want a response and a revisit record, got %d records", len(recs))
	}
	if resp.header["warc-target-uri"] != "http://a.test/one" || !bytes.HasSuffix(resp.block, body) {
		t.Errorf("response: %v", resp.header)
	}
	want := map[string]string{
		"warc-target-uri":           "http://a.test/two",
		"warc-date":                 at2.Format(time.RFC3339),
		"warc-profile":              "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest",
		"warc-refers-to":            resp.header["warc-record-id"],
		"warc-refers-to-target-uri": "http://a.test/one",
		"warc-refers-to-date":       resp.header["warc-date"],
		"warc-payload-digest":       sha1Base32(body),
		"warc-block-digest":         sha1Base32(rev.block),
	}
	for k, v := range want {
		if rev.header[k] != v {
			t.Errorf("revisit %s = %q, want %q", k, rev.header[k], v)
		}
	}
	if resp.header["warc-payload-digest"] != sha1Base32(body) {
		t.Errorf("response payload digest %q", resp.header["warc-payload-digest"])
	}
	if bytes.Contains(rev.block, body) || !strings.HasPrefix(string(rev.block), "HTTP/1.1 200") {
		t.Errorf("revisit block %q: want the HTTP head only", rev.block)
	}
	if !strings.Contains(lines.String(), `"final_url":"http://a.test/two"`) {
		t.Errorf("lines:\n%s", lines.String())
	}
}

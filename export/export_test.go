package export

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"downloader"
	"downloader/store/embedded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// warcRecord is one record as readWARC parsed it.
type warcRecord struct {
	version string
	header  map[string]string
	block   []byte
}

// readWARC is the test's own WARC reader, written from the WARC/1.1 specification and
// independent of gowarc: a version line, header fields up to an empty line, a block of
// Content-Length bytes, then CRLF CRLF. A .warc.gz is a series of gzip members, which
// compress/gzip reads as one stream.
func readWARC(t *testing.T, data []byte, compressed bool) []warcRecord {
	t.Helper()
	var r io.Reader = bytes.NewReader(data)
	if compressed {
		gz, err := gzip.NewReader(r)
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		r = gz
	}
	br := bufio.NewReader(r)
	var out []warcRecord
	for {
		line, err := br.ReadString('\n')
		if err == io.EOF && line == "" {
			return out
		}
		if err != nil {
			t.Fatalf("record %d: version line: %v", len(out), err)
		}
		rec := warcRecord{version: strings.TrimRight(line, "\r\n"), header: map[string]string{}}
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("record %d: header: %v", len(out), err)
			}
			if !strings.HasSuffix(line, "\r\n") {
				t.Fatalf("record %d: header line %q does not end in CRLF", len(out), line)
			}
			line = strings.TrimSuffix(line, "\r\n")
			if line == "" {
				break
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				t.Fatalf("record %d: header line %q", len(out), line)
			}
			rec.header[strings.ToLower(k)] = strings.TrimSpace(v)
		}
		n, err := strconv.Atoi(rec.header["content-length"])
		if err != nil {
			t.Fatalf("record %d: content-length %q", len(out), rec.header["content-length"])
		}
		rec.block = make([]byte, n)
		if _, err := io.ReadFull(br, rec.block); err != nil {
			t.Fatalf("record %d: block: %v", len(out), err)
		}
		end := make([]byte, 4)
		if _, err := io.ReadFull(br, end); err != nil || string(end) != "\r\n\r\n" {
			t.Fatalf("record %d: end marker %q, %v", len(out), end, err)
		}
		out = append(out, rec)
	}
}

func sha1Base32(b []byte) string {
	sum := sha1.Sum(b)
	return "sha1:" + base32.StdEncoding.EncodeToString(sum[:])
}

func TestExportLinesAndWARC(t *testing.T) {
	ctx := t.Context()
	st, err := embedded.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	plainBody := []byte("<!doctype html><p>plain page, served as is</p>")
	renderedBody := []byte("<html><body><p>rendered DOM</p></body></html>")
	bigBody := bytes.Repeat([]byte("x"), 300_000)
	// The plain page keeps its response headers as served (the big one, as a page stored
	// before headers were kept, has none).
	served := map[string][]string{"Content-Type": {"text/html; charset=utf-8"}, "Etag": {`"v1"`},
		"Set-Cookie": {"a=1", "b=2"}, "Content-Encoding": {"gzip"}, "Content-Length": {"31"}, "Transfer-Encoding": {"chunked"}}
	put := func(u, final, ct string, body []byte) string {
		var h map[string][]string
		if u == "http://a.test/p" {
			h = served
		}
		k, err := st.PutPage(ctx, &downloader.Page{URL: u, FinalURL: final, ContentType: ct, FetchedAt: at, ResponseHeaders: h, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	kPlain := put("http://a.test/p", "http://a.test/p/final", "text/html; charset=utf-8", plainBody)
	kRendered := put("http://b.test/r", "http://b.test/r", "text/html", renderedBody)
	kBig := put("http://c.test/big", "", "text/plain", bigBody)
	st200, st404 := 200, 404
	h2 := "2" // task 1 came over HTTP/2
	httpErr := downloader.FailHTTPStatusError
	skip := downloader.SkipRobotsDisallowed
	tasks := []Task{
		{Status: downloader.TaskStatus{TaskID: "1", URL: "http://a.test/p", Domain: "a.test", State: downloader.TaskDone, AttemptCount: 1},
			Report: &downloader.Report{TaskID: "1", FetchedAt: at, PageKey: kPlain, Summary: downloader.Summary{Domain: "a.test", HTTPStatus: &st200, HasReachedOrigin: true,
				HealthSignal: &downloader.HealthSignal{ContentType: "text/html; charset=utf-8", HTTPVersion: &h2}}}},
		{Status: downloader.TaskStatus{TaskID: "2", URL: "http://b.test/r", Domain: "b.test", State: downloader.TaskDone, AttemptCount: 1, ShouldRender: true},
			Report: &downloader.Report{TaskID: "2", FetchedAt: at, PageKey: kRendered, Summary: downloader.Summary{Domain: "b.test", HTTPStatus: &st200, HasReachedOrigin: true}}},
		{Status: downloader.TaskStatus{TaskID: "3", URL: "http://c.test/big", Domain: "c.test", State: downloader.TaskDone, AttemptCount: 2},
			Report: &downloader.Report{TaskID: "3", FetchedAt: at, PageKey: kBig, Summary: downloader.Summary{Domain: "c.test", HTTPStatus: &st200, HasReachedOrigin: true,
				HealthSignal: &downloader.HealthSignal{IsBodyTruncated: true}}}},
		{Status: downloader.TaskStatus{TaskID: "4", URL: "http://a.test/missing", Domain: "a.test", State: downloader.TaskFailed, AttemptCount: 1},
			Report: &downloader.Report{TaskID: "4", FetchedAt: at, Summary: downloader.Summary{Domain: "a.test", HTTPStatus: &st404, FailReason: &httpErr, HasReachedOrigin: true}}},
		{Status: downloader.TaskStatus{TaskID: "5", URL: "http://a.test/private", Domain: "a.test", State: downloader.TaskSkipped, SkipReason: &skip},
			Report: &downloader.Report{TaskID: "5", FetchedAt: at, SkipReason: skip, Summary: downloader.Summary{Domain: "a.test"}}},
		{Status: downloader.TaskStatus{TaskID: "6", URL: "http://d.test/", Domain: "d.test", State: downloader.TaskQueued}},
	}
	source := func(_ context.Context, f func(*Task) bool) error {
		for i := range tasks {
			if !f(&tasks[i]) {
				return nil
			}
		}
		return nil
	}
	for _, compressed := range []bool{true, false} {
		t.Run(fmt.Sprintf("gzip=%v", compressed), func(t *testing.T) {
			var lines, warc bytes.Buffer
			ww, err := NewWARCWriter(&warc, compressed, "crawl.warc.gz", "downloader test", "downloader/1.0", at)
			if err != nil {
				t.Fatal(err)
			}
			stats, err := Export(ctx, source, Options{Lines: &lines, WARC: ww, Pages: st})
			if err != nil {
				t.Fatal(err)
			}
			if stats.LineCount != 6 || stats.PageCount != 3 || stats.MissingCount != 0 || stats.WARCByteCount != int64(warc.Len()) {
				t.Fatalf("stats = %+v (file %d bytes)", stats, warc.Len())
			}
			checkLines(t, lines.String())
			checkWARC(t, readWARC(t, warc.Bytes(), compressed), plainBody, renderedBody, bigBody)
		})
	}
}

func checkLines(t *testing.T, out string) {
	t.Helper()
	ls := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(ls) != 6 {
		t.Fatalf("%d lines, want 6:\n%s", len(ls), out)
	}
	var got []map[string]any
	for i, l := range ls {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i+1, err, l)
		}
		for _, k := range []string{"task_id", "url", "final_url", "state", "domain", "http_status", "raw_text_length", "text_length",
			"health_signal", "fail_reason", "has_reached_origin", "attempt_count", "skip_reason", "page_key", "fetched_at"} {
			if _, ok := m[k]; !ok {
				t.Errorf("line %d lacks %s: %s", i+1, k, l)
			}
		}
		got = append(got, m)
	}
	if got[0]["final_url"] != "http://a.test/p/final" || got[0]["state"] != "done" || got[0]["http_status"] != float64(200) || got[0]["page_key"] == nil {
		t.Errorf("line 1: %v", got[0])
	}
	if got[2]["attempt_count"] != float64(2) {
		t.Errorf("line 3: %v", got[2])
	}
	if got[3]["state"] != "failed" || got[3]["fail_reason"] != "http_status_error" || got[3]["final_url"] != nil {
		t.Errorf("line 4: %v", got[3])
	}
	if got[4]["state"] != "skipped" || got[4]["skip_reason"] != "robots_disallowed" || got[4]["fail_reason"] != nil {
		t.Errorf("line 5: %v", got[4])
	}
	if got[5]["state"] != "queued" || got[5]["fetched_at"] != nil || got[5]["domain"] != "d.test" {
		t.Errorf("line 6: %v", got[5])
	}
}

func checkWARC(t *testing.T, recs []warcRecord, plainBody, renderedBody, bigBody []byte) {
	t.Helper()
	var types []string
	for _, r := range recs {
		types = append(types, r.header["warc-type"])
		if r.version != "WARC/1.1" {
			t.Errorf("version %q", r.version)
		}
		if want := sha1Base32(r.block); r.header["warc-block-digest"] != want {
			t.Errorf("%s record: block digest %q, computed %q", r.header["warc-type"], r.header["warc-block-digest"], want)
		}
		if r.header["warc-record-id"] == "" || r.header["warc-date"] == "" {
			t.Errorf("record without id or date: %v", r.header)
		}
	}
	// warcinfo; plain page: response + request; rendered: resource; big: response + request.
	if strings.Join(types, " ") != "warcinfo response request resource response request" {
		t.Fatalf("record types %v", types)
	}
	info, resp, req, res, bigResp := recs[0], recs[1], recs[2], recs[3], recs[4]
	if !strings.Contains(string(info.block), "format: WARC File Format 1.1") {
		t.Errorf("warcinfo block %q", info.block)
	}
	// The payload of a response is the HTTP body after the head.
	head, payload, ok := bytes.Cut(resp.block, []byte("\r\n\r\n"))
	if !ok || !bytes.Equal(payload, plainBody) || !bytes.HasPrefix(head, []byte("HTTP/1.1 200 OK\r\n")) ||
		!bytes.Contains(head, []byte("Content-Type: text/html; charset=utf-8")) {
		t.Errorf("response block %q", resp.block)
	}
	// The headers as served, but those about the bytes on the wire (the body is stored
	// decoded): one Content-Length, of the payload.
	for _, want := range []string{"Etag: \"v1\"\r\n", "Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n", "X-Downloader-Content-Encoding: gzip\r\n",
		fmt.Sprintf("Content-Length: %d", len(plainBody))} {
		if !bytes.Contains(head, []byte(want)) {
			t.Errorf("response head lacks %q:\n%s", want, head)
		}
	}
	if bytes.Contains(head, []byte("Transfer-Encoding")) || bytes.Count(head, []byte("Content-Length:")) != 1 || bytes.Contains(head, []byte("\nContent-Encoding")) {
		t.Errorf("response head keeps wire-only fields:\n%s", head)
	}
	bigHead, _, _ := bytes.Cut(bigResp.block, []byte("\r\n\r\n"))
	if !bytes.Contains(bigHead, []byte("Content-Type: text/plain\r\nContent-Length: 300000")) {
		t.Errorf("a page without stored headers: head %q", bigHead)
	}
	if got, want := resp.header["warc-payload-digest"], sha1Base32(plainBody); got != want {
		t.Errorf("response payload digest %q, want %q", got, want)
	}
	if resp.header["warc-target-uri"] != "http://a.test/p/final" || resp.header["content-type"] != "application/http;msgtype=response" ||
		resp.header["warc-date"] != "2026-05-06T07:08:09Z" || resp.header["warc-warcinfo-id"] != info.header["warc-record-id"] {
		t.Errorf("response header %v", resp.header)
	}
	// An HTTP/2 exchange is written as HTTP/1.1, and says what it was.
	if resp.header["warc-protocol"] != "h2" || req.header["warc-protocol"] != "h2" || bigResp.header["warc-protocol"] != "" {
		t.Errorf("WARC-Protocol: response %q request %q, an HTTP/1.1 response %q; want h2, h2 and none",
			resp.header["warc-protocol"], req.header["warc-protocol"], bigResp.header["warc-protocol"])
	}
	if !bytes.HasPrefix(req.block, []byte("GET /p/final HTTP/1.1\r\nHost: a.test\r\n")) || req.header["warc-concurrent-to"] != resp.header["warc-record-id"] {
		t.Errorf("request %v %q", req.header, req.block)
	}
	if !bytes.Equal(res.block, renderedBody) || res.header["warc-target-uri"] != "http://b.test/r" || res.header["content-type"] != "text/html" {
		t.Errorf("resource %v %q", res.header, res.block)
	}
	if got, want := res.header["warc-payload-digest"], sha1Base32(renderedBody); got != "" && got != want {
		t.Errorf("resource payload digest %q, want %q", got, want)
	}
	_, bigPayload, _ := bytes.Cut(bigResp.block, []byte("\r\n\r\n"))
	if !bytes.Equal(bigPayload, bigBody) || bigResp.header["warc-truncated"] != "length" || bigResp.header["warc-payload-digest"] != sha1Base32(bigBody) {
		t.Errorf("big response: %d payload bytes, header %v", len(bigPayload), bigResp.header)
	}
	if bigResp.header["warc-target-uri"] != "http://c.test/big" {
		t.Errorf("a page without final_url is filed under its URL: %v", bigResp.header)
	}
}

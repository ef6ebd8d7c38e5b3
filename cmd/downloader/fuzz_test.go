package main

import (
	"strings"
	"testing"
	"time"

	"downloader"
	"downloader/localqueue"
)

// FuzzParseCrawlLine: any line of a crawl file is either a task or an EINVALID error that
// names what is wrong; never a panic. A line the queue accepts has a URL that parses.
func FuzzParseCrawlLine(f *testing.F) {
	for _, s := range []string{
		"http://a.test/",
		`{"url":"http://a.test/x","min_interval_ms":250,"should_render":true,"should_store":false,"task_id":"t1"}`,
		`{"url":"http://a.test/","domain":"A.TEST."}`,
		`{"url":"http://a.test/","min_interval_ms":-1}`,
		`{"url":"http://a.test/","min_interval_ms":3600001}`,
		`{"url":"http://a.test/","render":true}`,
		`{"url":5}`, `{"url":"http://a.test/"} {"url":"http://b.test/"}`, `{`, `{}`, `{"url":null}`,
		"ftp://a.test/", "not a url", "http://[::1", "http://a.test/\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		task, err := parseCrawlLine(line)
		if err != nil {
			if downloader.ErrorCode(err) != downloader.EINVALID || downloader.ErrorField(err) == "" {
				t.Fatalf("parseCrawlLine(%q): %v, want an EINVALID error naming a field", line, err)
			}
			return
		}
		if !strings.HasPrefix(line, "{") && task.URL != line {
			t.Fatalf("parseCrawlLine(%q): URL %q, want the line itself", line, task.URL)
		}
		checked, err := localqueue.CheckTask(task, time.Second, downloader.HeaderPolicy{})
		if err != nil {
			if downloader.ErrorCode(err) != downloader.EINVALID || downloader.ErrorField(err) == "" {
				t.Fatalf("CheckTask(%+v): %v, want an EINVALID error naming a field", task, err)
			}
			return
		}
		if _, _, err := downloader.ParseTargetURL("url", checked.URL); err != nil {
			t.Fatalf("a task the queue accepts has a URL that does not parse: %q: %v", checked.URL, err)
		}
		if checked.MinIntervalMs == nil || *checked.MinIntervalMs < 0 || *checked.MinIntervalMs > downloader.MaxMinInterval.Milliseconds() {
			t.Fatalf("a task the queue accepts has min_interval_ms %v", checked.MinIntervalMs)
		}
	})
}

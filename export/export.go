// Package export writes a crawl's results out of the data directory: one JSON line per
// task (the lean summary with the task's identity, state, attempts and skip reason), and
// the stored pages as WARC/1.1 (warc.go). `downloader crawl --output --warc` and
// `downloader export` use it.
package export

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"downloader"
)

// Task is one task as the exporter reads it: its status and its last report (nil before
// the first).
type Task struct {
	Status downloader.TaskStatus
	Report *downloader.Report
}

// Tasks calls f for every task, in a stable order, until f returns false (over the local
// queue: localqueue.RangeTasks).
type Tasks func(ctx context.Context, f func(t *Task) bool) error

// Line is one JSON line of --output: the summary fields (SPEC §5), the task's identity and
// where its page went, its state and attempt count, and why it was skipped. Fields that
// are unknown (no report yet, no page) are null.
type Line struct {
	TaskID string `json:"task_id"`
	URL    string `json:"url"`
	// FinalURL is the URL after redirects, known when the page was stored.
	FinalURL *string              `json:"final_url"`
	State    downloader.TaskState `json:"state"`
	downloader.Summary
	AttemptCount int                    `json:"attempt_count"`
	SkipReason   *downloader.SkipReason `json:"skip_reason"`
	PageKey      *string                `json:"page_key"`
	FetchedAt    *time.Time             `json:"fetched_at"`
}

// Stats counts what Export wrote.
type Stats struct {
	LineCount     int // JSON lines
	PageCount     int // pages written to the WARC file
	RevisitCount  int // of which as revisit records (a body an earlier record holds)
	MissingCount  int // pages a report names that the page store no longer has
	WARCByteCount int64
}

// Options says where Export writes. Lines and WARC may each be nil (not written).
type Options struct {
	Lines io.Writer
	WARC  *WARCWriter
	Pages downloader.PageStore // required with WARC
}

// Export writes every task of tasks as a JSON line and every stored page as WARC records.
// A page a report names but the store lacks is counted, not an error.
func Export(ctx context.Context, tasks Tasks, o Options) (Stats, error) {
	var st Stats
	var enc *json.Encoder
	if o.Lines != nil {
		enc = json.NewEncoder(o.Lines)
	}
	var werr error
	err := tasks(ctx, func(t *Task) bool {
		var page *downloader.Page
		if t.Report != nil && t.Report.PageKey != "" && o.Pages != nil {
			p, err := o.Pages.Page(ctx, t.Report.PageKey)
			switch {
			case err == nil:
				page = p
			case downloader.ErrorCode(err) == downloader.ENOTFOUND:
				st.MissingCount++
			default:
				werr = fmt.Errorf("read page %s of task %s: %w", t.Report.PageKey, t.Status.TaskID, err)
				return false
			}
		}
		if enc != nil {
			var p *downloader.Page
			if page != nil {
				p = pageOfTask(t, page)
			}
			if err := enc.Encode(lineOf(t, p)); err != nil {
				werr = fmt.Errorf("write JSON line: %w", err)
				return false
			}
			st.LineCount++
		}
		if o.WARC != nil && page != nil {
			if err := o.WARC.WritePage(t, pageOfTask(t, page)); err != nil {
				werr = err
				return false
			}
			st.PageCount++
		}
		return true
	})
	if err == nil {
		err = werr
	}
	if o.WARC != nil {
		st.WARCByteCount = o.WARC.ByteCount()
		st.RevisitCount = o.WARC.RevisitCount()
	}
	return st, err
}

// pageOfTask is p as task t fetched it. The page store keeps one copy of a body, with the
// URL, final URL and fetch time of the first task that stored it: another task with the
// same body keeps its own URL and fetch time (its final URL after redirects is not
// kept).
func pageOfTask(t *Task, p *downloader.Page) *downloader.Page {
	if p.URL == t.Status.URL || t.Status.URL == "" {
		return p
	}
	c := *p
	c.URL, c.FinalURL = t.Status.URL, ""
	if t.Report != nil && !t.Report.FetchedAt.IsZero() {
		c.FetchedAt = t.Report.FetchedAt
	}
	return &c
}

func lineOf(t *Task, page *downloader.Page) Line {
	s := t.Status
	l := Line{TaskID: s.TaskID, URL: s.URL, State: s.State, AttemptCount: s.AttemptCount, SkipReason: s.SkipReason,
		Summary: downloader.Summary{Domain: s.Domain}}
	if r := t.Report; r != nil {
		l.Summary = r.Summary
		if l.Domain == "" {
			l.Domain = s.Domain
		}
		at := r.FetchedAt.UTC()
		l.FetchedAt = &at
		if r.PageKey != "" {
			k := r.PageKey
			l.PageKey = &k
		}
	}
	if page != nil {
		fu := page.FinalURL
		if fu == "" {
			fu = page.URL
		}
		l.FinalURL = &fu
	}
	return l
}

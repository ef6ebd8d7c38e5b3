package downloader

import (
	"strconv"
	"time"
)

// The stored forms of a report and a fetch_result (the local queue's record, the outbox,
// the embedded store's fetch_result table) leave out every field whose value is its zero
// value: a nil pointer (JSON null), false, 0 or "". Every reader decodes a stored value
// with encoding/json into a new, zero value, where an absent field and a null or zero one
// come out the same: the value read back, and so what the API serves (always every field,
// nulls included: SPEC §3's one shape of health_signal), is the value written. A plain
// fetch's report carries ten render-only counts, all null, and a success's null
// fail_reason: written out they were a third of each encoding, and a task's end wrote the
// report twice (the queue's record and the fetch_result). Values written in the full form
// (json.Marshal's, by earlier versions) read as before. The AppendJSON encoders stay for
// where the full form is the contract.

// AppendStoredJSON appends r's stored form: r as json.Marshal writes it, without the
// fields that hold their zero value.
func (r *Report) AppendStoredJSON(b []byte) ([]byte, error) {
	o := storedObject{b: append(b, '{')}
	o.str("task_id", r.TaskID)
	o.summary(&r.Summary)
	if err := o.time("fetched_at", r.FetchedAt); err != nil {
		return nil, err
	}
	o.str("page_key", r.PageKey)
	o.str("skip_reason", string(r.SkipReason))
	return append(o.b, '}'), nil
}

// AppendStoredJSON appends f's stored form: f as json.Marshal writes it, without the
// fields that hold their zero value.
func (f *FetchResult) AppendStoredJSON(b []byte) ([]byte, error) {
	o := storedObject{b: append(b, '{')}
	o.summary(&f.Summary)
	o.str("task_id", f.TaskID)
	o.str("url", f.URL)
	o.str("final_url", f.FinalURL)
	o.str("entry", string(f.Entry))
	if err := o.time("fetched_at", f.FetchedAt); err != nil {
		return nil, err
	}
	o.str("page_key", f.PageKey)
	return append(o.b, '}'), nil
}

// storedObject writes one JSON object's fields, each only when it is not its zero value,
// with the commas between them.
type storedObject struct {
	b       []byte
	hasMore bool
}

func (o *storedObject) key(k string) {
	if o.hasMore {
		o.b = append(o.b, ',')
	}
	o.hasMore = true
	o.b = append(o.b, '"')
	o.b = append(o.b, k...)
	o.b = append(o.b, '"', ':')
}

func (o *storedObject) str(k, v string) {
	if v != "" {
		o.key(k)
		o.b = AppendJSONString(o.b, v)
	}
}

func (o *storedObject) int(k string, v int64) {
	if v != 0 {
		o.key(k)
		o.b = strconv.AppendInt(o.b, v, 10)
	}
}

func (o *storedObject) intPtr(k string, p *int) {
	if p != nil {
		o.key(k)
		o.b = strconv.AppendInt(o.b, int64(*p), 10)
	}
}

func (o *storedObject) boolean(k string, v bool) {
	if v {
		o.key(k)
		o.b = append(o.b, "true"...)
	}
}

// time writes t always: a report and a result always have their fetched_at.
func (o *storedObject) time(k string, t time.Time) error {
	o.key(k)
	var err error
	o.b, err = AppendJSONTime(o.b, t)
	return err
}

func (o *storedObject) summary(s *Summary) {
	o.str("domain", s.Domain)
	o.intPtr("http_status", s.HTTPStatus)
	o.intPtr("raw_text_length", s.RawTextLength)
	o.intPtr("text_length", s.TextLength)
	if h := s.HealthSignal; h != nil {
		o.key("health_signal")
		inner := storedObject{b: append(o.b, '{')}
		inner.healthSignal(h)
		o.b = append(inner.b, '}')
	}
	if s.FailReason != nil {
		o.key("fail_reason")
		o.b = AppendJSONString(o.b, string(*s.FailReason))
	}
	o.boolean("has_reached_origin", s.HasReachedOrigin)
}

func (o *storedObject) healthSignal(h *HealthSignal) {
	o.int("elapsed_ms", h.ElapsedMs)
	o.int("body_bytes", h.BodyBytes)
	o.str("content_type", h.ContentType)
	o.int("redirect_count", int64(h.RedirectCount))
	o.boolean("is_body_truncated", h.IsBodyTruncated)
	if h.RetryAfterSeconds != nil {
		o.key("retry_after_seconds")
		o.b = strconv.AppendInt(o.b, *h.RetryAfterSeconds, 10)
	}
	if h.HTTPVersion != nil {
		o.key("http_version")
		o.b = AppendJSONString(o.b, *h.HTTPVersion)
	}
	o.boolean("is_not_modified", h.IsNotModified)
	o.intPtr("xhr_count", h.XHRCount)
	o.intPtr("xhr_failed_count", h.XHRFailedCount)
	o.intPtr("subrequest_count", h.SubrequestCount)
	o.intPtr("subrequest_failed_count", h.SubrequestFailedCount)
	o.intPtr("blocked_request_count", h.BlockedRequestCount)
	o.intPtr("skipped_request_count", h.SkippedRequestCount)
	o.intPtr("popup_count", h.PopupCount)
	o.intPtr("skipped_frame_count", h.SkippedFrameCount)
	o.intPtr("capped_subrequest_count", h.CappedSubrequestCount)
}

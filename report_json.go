package downloader

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// The encoders below write, byte for byte, what json.Marshal writes for the same value:
// a report is encoded once or twice per task (in the local queue's record and in the
// outbox) and a fetch_result once, and json.Marshal's reflection over them was the largest
// part of the JSON cost left on entry A's path. What needs more than the plain form (a
// string with escapes, a time RFC 3339 cannot hold) is left to encoding/json, so the
// output stays exactly json.Marshal's; report_json_test.go compares the two, with every
// field set, so a field added to these types without its encoder fails there. Decoding
// stays encoding/json: the format does not change.

// AppendJSON appends r as json.Marshal(r) writes it.
func (r *Report) AppendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, `{"task_id":`...)
	b = AppendJSONString(b, r.TaskID)
	b = append(b, ',')
	b = r.Summary.appendJSONFields(b)
	b = append(b, `,"fetched_at":`...)
	if b, err = AppendJSONTime(b, r.FetchedAt); err != nil {
		return nil, err
	}
	if r.PageKey != "" {
		b = append(b, `,"page_key":`...)
		b = AppendJSONString(b, r.PageKey)
	}
	if r.SkipReason != "" {
		b = append(b, `,"skip_reason":`...)
		b = AppendJSONString(b, string(r.SkipReason))
	}
	return append(b, '}'), nil
}

// AppendJSON appends f as json.Marshal(f) writes it.
func (f *FetchResult) AppendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, '{')
	b = f.Summary.appendJSONFields(b)
	if f.TaskID != "" {
		b = append(b, `,"task_id":`...)
		b = AppendJSONString(b, f.TaskID)
	}
	b = append(b, `,"url":`...)
	b = AppendJSONString(b, f.URL)
	if f.FinalURL != "" {
		b = append(b, `,"final_url":`...)
		b = AppendJSONString(b, f.FinalURL)
	}
	b = append(b, `,"entry":`...)
	b = AppendJSONString(b, string(f.Entry))
	b = append(b, `,"fetched_at":`...)
	if b, err = AppendJSONTime(b, f.FetchedAt); err != nil {
		return nil, err
	}
	if f.PageKey != "" {
		b = append(b, `,"page_key":`...)
		b = AppendJSONString(b, f.PageKey)
	}
	return append(b, '}'), nil
}

// appendJSONFields appends s's fields, without braces, as they appear in a struct that
// embeds it.
func (s *Summary) appendJSONFields(b []byte) []byte {
	b = append(b, `"domain":`...)
	b = AppendJSONString(b, s.Domain)
	b = append(b, `,"http_status":`...)
	b = appendJSONInt(b, s.HTTPStatus)
	b = append(b, `,"raw_text_length":`...)
	b = appendJSONInt(b, s.RawTextLength)
	b = append(b, `,"text_length":`...)
	b = appendJSONInt(b, s.TextLength)
	b = append(b, `,"health_signal":`...)
	if s.HealthSignal == nil {
		b = append(b, "null"...)
	} else {
		b = s.HealthSignal.appendJSON(b)
	}
	b = append(b, `,"fail_reason":`...)
	if s.FailReason == nil {
		b = append(b, "null"...)
	} else {
		b = AppendJSONString(b, string(*s.FailReason))
	}
	b = append(b, `,"has_reached_origin":`...)
	return strconv.AppendBool(b, s.HasReachedOrigin)
}

func (h *HealthSignal) appendJSON(b []byte) []byte {
	b = append(b, `{"elapsed_ms":`...)
	b = strconv.AppendInt(b, h.ElapsedMs, 10)
	b = append(b, `,"body_bytes":`...)
	b = strconv.AppendInt(b, h.BodyBytes, 10)
	b = append(b, `,"content_type":`...)
	b = AppendJSONString(b, h.ContentType)
	b = append(b, `,"redirect_count":`...)
	b = strconv.AppendInt(b, int64(h.RedirectCount), 10)
	b = append(b, `,"is_body_truncated":`...)
	b = strconv.AppendBool(b, h.IsBodyTruncated)
	b = append(b, `,"retry_after_seconds":`...)
	if h.RetryAfterSeconds == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, *h.RetryAfterSeconds, 10)
	}
	b = append(b, `,"http_version":`...)
	if h.HTTPVersion == nil {
		b = append(b, "null"...)
	} else {
		b = AppendJSONString(b, *h.HTTPVersion)
	}
	b = append(b, `,"is_not_modified":`...)
	b = strconv.AppendBool(b, h.IsNotModified)
	b = append(b, `,"xhr_count":`...)
	b = appendJSONInt(b, h.XHRCount)
	b = append(b, `,"xhr_failed_count":`...)
	b = appendJSONInt(b, h.XHRFailedCount)
	b = append(b, `,"subrequest_count":`...)
	b = appendJSONInt(b, h.SubrequestCount)
	b = append(b, `,"subrequest_failed_count":`...)
	b = appendJSONInt(b, h.SubrequestFailedCount)
	b = append(b, `,"blocked_request_count":`...)
	b = appendJSONInt(b, h.BlockedRequestCount)
	b = append(b, `,"skipped_request_count":`...)
	b = appendJSONInt(b, h.SkippedRequestCount)
	b = append(b, `,"popup_count":`...)
	b = appendJSONInt(b, h.PopupCount)
	b = append(b, `,"skipped_frame_count":`...)
	b = appendJSONInt(b, h.SkippedFrameCount)
	b = append(b, `,"capped_subrequest_count":`...)
	b = appendJSONInt(b, h.CappedSubrequestCount)
	return append(b, '}')
}

// appendJSONInt appends *p, or null for nil.
func appendJSONInt(b []byte, p *int) []byte {
	if p == nil {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, int64(*p), 10)
}

// AppendJSONString appends s as encoding/json writes it: plain when every byte is
// printable ASCII that needs no escape (HTML characters included, which json escapes),
// otherwise through json.Marshal. The stores' hand encoders share it.
func AppendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s) // a string always encodes
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendJSONTime appends t as time.Time.MarshalJSON does (RFC 3339 with nanoseconds),
// through it when the year or the zone offset is outside what RFC 3339 covers (it then
// fails alike).
func AppendJSONTime(b []byte, t time.Time) ([]byte, error) {
	_, off := t.Zone()
	if y := t.Year(); y < 0 || y > 9999 || off <= -24*3600 || off >= 24*3600 {
		j, err := t.MarshalJSON()
		if err != nil {
			return nil, err
		}
		return append(b, j...), nil
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

package embedded

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// encodeQueueRecord is json.Marshal(rec), byte for byte, written by hand: every Submit,
// Lease and Report rewrites a task's record, and reflection over the record (with the
// time fields' MarshalJSON) was the largest part of the queue's CPU. A string or time that
// needs more than the plain form (escapes, a year outside 0..9999) and the report are
// left to encoding/json, so the output stays exactly what json.Marshal gives (the
// table test in queue_json_test.go compares the two). It appends to b.
func encodeQueueRecord(b []byte, rec *queueRecord) ([]byte, error) {
	var err error
	b = append(b, `{"task_id":`...)
	b = appendJSONString(b, rec.TaskID)
	b = append(b, `,"url":`...)
	b = appendJSONString(b, rec.URL)
	b = append(b, `,"domain":`...)
	b = appendJSONString(b, rec.Domain)
	b = append(b, `,"min_interval_ms":`...)
	if rec.MinIntervalMs == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, *rec.MinIntervalMs, 10)
	}
	b = append(b, `,"should_render":`...)
	b = strconv.AppendBool(b, rec.ShouldRender)
	b = append(b, `,"should_store":`...)
	b = strconv.AppendBool(b, rec.ShouldStore)
	b = append(b, `,"lease_expires_at":`...)
	if b, err = appendJSONTime(b, rec.LeaseExpiresAt); err != nil {
		return nil, err
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, rec.Seq, 10)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, rec.State)
	b = append(b, `,"submitted_at":`...)
	if b, err = appendJSONTime(b, rec.SubmittedAt); err != nil {
		return nil, err
	}
	b = append(b, `,"lease_count":`...)
	b = strconv.AppendInt(b, int64(rec.LeaseCount), 10)
	if rec.Report != nil {
		r, err := json.Marshal(rec.Report)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"report":`...)
		b = append(b, r...)
	}
	b = append(b, `,"attempt_count":`...)
	b = strconv.AppendInt(b, int64(rec.AttemptCount), 10)
	b = append(b, `,"own_failure_count":`...)
	b = strconv.AppendInt(b, int64(rec.OwnFailureCount), 10)
	if !rec.NextAttemptAt.IsZero() {
		b = append(b, `,"next_attempt_at":`...)
		if b, err = appendJSONTime(b, rec.NextAttemptAt); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendJSONString appends s as encoding/json writes it: plain when every byte is
// printable ASCII that needs no escape (HTML characters included, which json escapes),
// otherwise through json.Marshal.
func appendJSONString(b []byte, s string) []byte {
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

// appendJSONTime appends t as time.Time.MarshalJSON does (RFC 3339 with nanoseconds),
// through it when the year or the zone offset is outside what RFC 3339 covers (it then
// fails alike).
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
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

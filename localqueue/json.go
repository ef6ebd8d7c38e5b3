package localqueue

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"downloader"
)

// encodeQueueRecord is json.Marshal(rec) written by hand, less what a fresh decode gives
// back by itself: the fields holding their zero value (false, 0, a zero time, a nil
// min_interval_ms) are left out, and the report is in its stored form
// (Report.AppendStoredJSON). Every Submit and Report writes a task's record, and
// reflection over it (with the time fields' MarshalJSON) was the largest part of the
// queue's CPU; every byte of it is written to the write-ahead log, then again by flushes
// and compactions, and most records are a plain fetch's, whose zero fields were a fifth of
// them. task_id, url, domain, seq, state and submitted_at are always written. A string or
// time that needs more than the plain form (escapes, a year outside 0..9999) is left to
// encoding/json by the root package's helpers. Every reader decodes into a fresh record
// (decodeQueueRecord), so a record written in full by an earlier version reads as before;
// the table tests in json_test.go compare what both forms decode to. It appends to b.
func encodeQueueRecord(b []byte, rec *queueRecord) ([]byte, error) {
	if len(rec.RequestHeaders) > 0 {
		// A map's keys in sorted order, escaped: rare enough to leave to encoding/json, in
		// full (the plain decoder, not finding "seq" where it expects it, leaves it to
		// encoding/json too).
		v, err := json.Marshal(rec)
		return append(b, v...), err
	}
	var err error
	b = append(b, `{"task_id":`...)
	b = downloader.AppendJSONString(b, rec.TaskID)
	b = append(b, `,"url":`...)
	b = downloader.AppendJSONString(b, rec.URL)
	b = append(b, `,"domain":`...)
	b = downloader.AppendJSONString(b, rec.Domain)
	if rec.MinIntervalMs != nil {
		b = append(b, `,"min_interval_ms":`...)
		b = strconv.AppendInt(b, *rec.MinIntervalMs, 10)
	}
	if rec.ShouldRender {
		b = append(b, `,"should_render":true`...)
	}
	if rec.ShouldStore {
		b = append(b, `,"should_store":true`...)
	}
	if !rec.LeaseExpiresAt.IsZero() {
		b = append(b, `,"lease_expires_at":`...)
		if b, err = downloader.AppendJSONTime(b, rec.LeaseExpiresAt); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, rec.Seq, 10)
	b = append(b, `,"state":`...)
	b = downloader.AppendJSONString(b, rec.State)
	b = append(b, `,"submitted_at":`...)
	if b, err = downloader.AppendJSONTime(b, rec.SubmittedAt); err != nil {
		return nil, err
	}
	b = appendNonZeroInt(b, `,"lease_count":`, rec.LeaseCount)
	if rec.Report != nil {
		b = append(b, `,"report":`...)
		if b, err = rec.Report.AppendStoredJSON(b); err != nil {
			return nil, err
		}
	}
	b = appendNonZeroInt(b, `,"attempt_count":`, rec.AttemptCount)
	b = appendNonZeroInt(b, `,"own_failure_count":`, rec.OwnFailureCount)
	if !rec.NextAttemptAt.IsZero() {
		b = append(b, `,"next_attempt_at":`...)
		if b, err = downloader.AppendJSONTime(b, rec.NextAttemptAt); err != nil {
			return nil, err
		}
	}
	b = appendNonZeroInt(b, `,"depth":`, rec.Depth)
	return append(b, '}'), nil
}

// appendNonZeroInt appends key and n unless n is 0.
func appendNonZeroInt(b []byte, key string, n int) []byte {
	if n == 0 {
		return b
	}
	b = append(b, key...)
	return strconv.AppendInt(b, int64(n), 10)
}

// appendStoredCounts appends the stored form of c (queueCountsKey) to b: the counts no
// index gives back (Counts without pending_count and leased_count), as JSON, each left out
// when it is 0 (failed_count when it has no reason), which Open's decode into a fresh
// Counts gives back; the full form of earlier versions reads the same (json_test.go). It
// is written with every report, so most of its fields, 0 for a crawl going well, were
// bytes written for nothing.
func appendStoredCounts(b []byte, c *Counts) []byte {
	n := len(b)
	b = append(b, '{')
	b = appendNonZeroInt(b, `,"done_count":`, c.DoneCount)
	b = appendNonZeroInt(b, `,"succeeded_count":`, c.SucceededCount)
	b = appendNonZeroInt(b, `,"skipped_count":`, c.SkippedCount)
	b = appendNonZeroInt(b, `,"retry_count":`, c.RetryCount)
	if len(c.FailedCount) > 0 {
		var arr [16]string // no allocation for the usual handful of reasons
		reasons := arr[:0]
		for r := range c.FailedCount {
			reasons = append(reasons, string(r))
		}
		slices.Sort(reasons)
		b = append(b, `,"failed_count":{`...)
		for i, r := range reasons {
			if i > 0 {
				b = append(b, ',')
			}
			b = downloader.AppendJSONString(b, r)
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(c.FailedCount[downloader.FailReason(r)]), 10)
		}
		b = append(b, '}')
	}
	b = appendNonZeroInt(b, `,"page_count":`, c.PageCount)
	if len(b) > n+1 {
		b = append(b[:n+1], b[n+2:]...) // the first field's comma
	}
	return append(b, '}')
}

// decodeQueueRecord is json.Unmarshal(v, rec) for a fresh rec. Every Lease decodes the
// record it hands out, and encoding/json's reflection was most of that decode. Records the
// queue wrote itself (encodeQueueRecord: fixed key order, no spaces) without a report and
// whose strings are plain ASCII are read by hand (decodeQueueRecordPlain); anything else (a
// report, an escape, non-ASCII, an older layout, a damaged value) goes to encoding/json, so
// the result is always what json.Unmarshal gives (the table test in json_test.go compares
// them field by field).
func decodeQueueRecord(v []byte, rec *queueRecord) error {
	if decodeQueueRecordPlain(v, rec) {
		return nil
	}
	*rec = queueRecord{}
	return json.Unmarshal(v, rec)
}

// decodeQueueRecordPlain reads v into rec if v has exactly encodeQueueRecord's layout with
// no report (each field it may leave out present or not, the full form of earlier
// versions included), and reports whether it did; on false rec holds garbage.
func decodeQueueRecordPlain(v []byte, rec *queueRecord) bool {
	*rec = queueRecord{} // a field left out is its zero value, as in a fresh decode
	d := plainDecoder{v: v}
	var ms int64
	hasMs := false
	ok := d.key(`{"task_id":`) && d.str(&rec.TaskID) &&
		d.key(`,"url":`) && d.str(&rec.URL) &&
		d.key(`,"domain":`) && d.str(&rec.Domain) &&
		d.optional(`,"min_interval_ms":`, func() bool { return d.nullableInt(&ms, &hasMs) }) &&
		d.optional(`,"should_render":`, func() bool { return d.boolean(&rec.ShouldRender) }) &&
		d.optional(`,"should_store":`, func() bool { return d.boolean(&rec.ShouldStore) }) &&
		d.optional(`,"lease_expires_at":`, func() bool { return d.time(&rec.LeaseExpiresAt) }) &&
		d.key(`,"seq":`) && d.uint(&rec.Seq) &&
		d.key(`,"state":`) && d.str(&rec.State) &&
		d.key(`,"submitted_at":`) && d.time(&rec.SubmittedAt) &&
		d.optional(`,"lease_count":`, func() bool { return d.int(&rec.LeaseCount) }) &&
		d.optional(`,"attempt_count":`, func() bool { return d.int(&rec.AttemptCount) }) &&
		d.optional(`,"own_failure_count":`, func() bool { return d.int(&rec.OwnFailureCount) }) &&
		d.optional(`,"next_attempt_at":`, func() bool { return d.time(&rec.NextAttemptAt) }) &&
		d.optional(`,"depth":`, func() bool { return d.int(&rec.Depth) })
	if !ok || !d.key(`}`) || d.i != len(d.v) {
		return false
	}
	if hasMs {
		rec.MinIntervalMs = &ms
	}
	return true
}

// plainDecoder walks a value left to right; every method consumes what it accepts and
// reports false on anything outside the plain layout.
type plainDecoder struct {
	v []byte
	i int
}

// optional reads k and its value with read when v has k at the cursor; without it, the
// field is what a fresh decode leaves it: read is not called, and the caller's zero stands.
func (d *plainDecoder) optional(k string, read func() bool) bool {
	if !d.key(k) {
		return true
	}
	return read()
}

func (d *plainDecoder) key(k string) bool {
	if len(d.v)-d.i < len(k) || string(d.v[d.i:d.i+len(k)]) != k {
		return false
	}
	d.i += len(k)
	return true
}

// str reads a quoted string of printable ASCII without escapes.
func (d *plainDecoder) str(s *string) bool {
	if d.i >= len(d.v) || d.v[d.i] != '"' {
		return false
	}
	for j := d.i + 1; j < len(d.v); j++ {
		c := d.v[j]
		switch {
		case c == '"':
			*s = string(d.v[d.i+1 : j])
			d.i = j + 1
			return true
		case c < 0x20 || c >= utf8.RuneSelf || c == '\\':
			return false
		}
	}
	return false
}

// digits returns the run of an optional '-' and decimal digits at the cursor, as
// encoding/json's number grammar allows it (no leading zero but a lone 0, no fraction or
// exponent: those go to encoding/json, which refuses them for integer fields).
func (d *plainDecoder) digits(signed bool) ([]byte, bool) {
	j := d.i
	if signed && j < len(d.v) && d.v[j] == '-' {
		j++
	}
	start := j
	for j < len(d.v) && d.v[j] >= '0' && d.v[j] <= '9' {
		j++
	}
	if j == start || (d.v[start] == '0' && j-start > 1) {
		return nil, false
	}
	if j < len(d.v) && (d.v[j] == '.' || d.v[j] == 'e' || d.v[j] == 'E') {
		return nil, false
	}
	n := d.v[d.i:j]
	d.i = j
	return n, true
}

func (d *plainDecoder) int(n *int) bool {
	b, ok := d.digits(true)
	if !ok {
		return false
	}
	x, err := strconv.ParseInt(string(b), 10, strconv.IntSize)
	*n = int(x)
	return err == nil
}

func (d *plainDecoder) uint(n *uint64) bool {
	b, ok := d.digits(false)
	if !ok {
		return false
	}
	x, err := strconv.ParseUint(string(b), 10, 64)
	*n = x
	return err == nil
}

func (d *plainDecoder) nullableInt(n *int64, has *bool) bool {
	if d.key("null") {
		*has = false
		return true
	}
	b, ok := d.digits(true)
	if !ok {
		return false
	}
	x, err := strconv.ParseInt(string(b), 10, 64)
	*n, *has = x, true
	return err == nil
}

func (d *plainDecoder) boolean(b *bool) bool {
	switch {
	case d.key("true"):
		*b = true
	case d.key("false"):
		*b = false
	default:
		return false
	}
	return true
}

// time reads a quoted time through time.Time.UnmarshalJSON, as encoding/json does.
func (d *plainDecoder) time(t *time.Time) bool {
	if d.i >= len(d.v) || d.v[d.i] != '"' {
		return false
	}
	for j := d.i + 1; j < len(d.v); j++ {
		c := d.v[j]
		if c == '"' {
			if t.UnmarshalJSON(d.v[d.i:j+1]) != nil {
				return false
			}
			d.i = j + 1
			return true
		}
		if c < 0x20 || c >= utf8.RuneSelf || c == '\\' {
			return false
		}
	}
	return false
}

package localqueue

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"downloader"
)

// encodeQueueRecord is json.Marshal(rec), byte for byte, written by hand, but for the
// report, which is in its stored form (Report.AppendStoredJSON: its zero and null fields
// left out, read back the same by encoding/json): every Submit, Lease and Report rewrites
// a task's record, and reflection over the record (with the time fields' MarshalJSON) was
// the largest part of the queue's CPU. A string or time that needs more than the plain
// form (escapes, a year outside 0..9999) is left to encoding/json by the root package's
// helpers (the table test in json_test.go compares the output with json.Marshal's, and
// what a record with a report decodes to). It appends to b.
func encodeQueueRecord(b []byte, rec *queueRecord) ([]byte, error) {
	if len(rec.RequestHeaders) > 0 {
		// A map's keys in sorted order, escaped: rare enough to leave to encoding/json (the
		// plain decoder, not finding "seq" where it expects it, leaves it to encoding/json too).
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
	if b, err = downloader.AppendJSONTime(b, rec.LeaseExpiresAt); err != nil {
		return nil, err
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, rec.Seq, 10)
	b = append(b, `,"state":`...)
	b = downloader.AppendJSONString(b, rec.State)
	b = append(b, `,"submitted_at":`...)
	if b, err = downloader.AppendJSONTime(b, rec.SubmittedAt); err != nil {
		return nil, err
	}
	b = append(b, `,"lease_count":`...)
	b = strconv.AppendInt(b, int64(rec.LeaseCount), 10)
	if rec.Report != nil {
		b = append(b, `,"report":`...)
		if b, err = rec.Report.AppendStoredJSON(b); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"attempt_count":`...)
	b = strconv.AppendInt(b, int64(rec.AttemptCount), 10)
	b = append(b, `,"own_failure_count":`...)
	b = strconv.AppendInt(b, int64(rec.OwnFailureCount), 10)
	if !rec.NextAttemptAt.IsZero() {
		b = append(b, `,"next_attempt_at":`...)
		if b, err = downloader.AppendJSONTime(b, rec.NextAttemptAt); err != nil {
			return nil, err
		}
	}
	if rec.Depth != 0 {
		b = append(b, `,"depth":`...)
		b = strconv.AppendInt(b, int64(rec.Depth), 10)
	}
	return append(b, '}'), nil
}

// storedCounts is the stored form of Counts (queueCountsKey): the counts no index gives
// back. appendStoredCounts writes json.Marshal's bytes of it by hand (a table test
// compares the two): it is encoded with every report.
type storedCounts struct {
	DoneCount      int                           `json:"done_count"`
	SucceededCount int                           `json:"succeeded_count"`
	SkippedCount   int                           `json:"skipped_count"`
	RetryCount     int                           `json:"retry_count"`
	FailedCount    map[downloader.FailReason]int `json:"failed_count"`
	PageCount      int                           `json:"page_count"`
}

// appendStoredCounts appends the stored form of c to b, as json.Marshal(storedCounts)
// would write it (map keys sorted).
func appendStoredCounts(b []byte, c *Counts) []byte {
	b = append(b, `{"done_count":`...)
	b = strconv.AppendInt(b, int64(c.DoneCount), 10)
	b = append(b, `,"succeeded_count":`...)
	b = strconv.AppendInt(b, int64(c.SucceededCount), 10)
	b = append(b, `,"skipped_count":`...)
	b = strconv.AppendInt(b, int64(c.SkippedCount), 10)
	b = append(b, `,"retry_count":`...)
	b = strconv.AppendInt(b, int64(c.RetryCount), 10)
	b = append(b, `,"failed_count":`...)
	if c.FailedCount == nil {
		b = append(b, "null"...)
	} else {
		var arr [16]string // no allocation for the usual handful of reasons
		reasons := arr[:0]
		for r := range c.FailedCount {
			reasons = append(reasons, string(r))
		}
		slices.Sort(reasons)
		b = append(b, '{')
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
	b = append(b, `,"page_count":`...)
	b = strconv.AppendInt(b, int64(c.PageCount), 10)
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
// no report, and reports whether it did; on false rec holds garbage.
func decodeQueueRecordPlain(v []byte, rec *queueRecord) bool {
	d := plainDecoder{v: v}
	var ms int64
	hasMs := false
	ok := d.key(`{"task_id":`) && d.str(&rec.TaskID) &&
		d.key(`,"url":`) && d.str(&rec.URL) &&
		d.key(`,"domain":`) && d.str(&rec.Domain) &&
		d.key(`,"min_interval_ms":`) && d.nullableInt(&ms, &hasMs) &&
		d.key(`,"should_render":`) && d.boolean(&rec.ShouldRender) &&
		d.key(`,"should_store":`) && d.boolean(&rec.ShouldStore) &&
		d.key(`,"lease_expires_at":`) && d.time(&rec.LeaseExpiresAt) &&
		d.key(`,"seq":`) && d.uint(&rec.Seq) &&
		d.key(`,"state":`) && d.str(&rec.State) &&
		d.key(`,"submitted_at":`) && d.time(&rec.SubmittedAt) &&
		d.key(`,"lease_count":`) && d.int(&rec.LeaseCount) &&
		d.key(`,"attempt_count":`) && d.int(&rec.AttemptCount) &&
		d.key(`,"own_failure_count":`) && d.int(&rec.OwnFailureCount)
	if !ok {
		return false
	}
	if d.key(`,"next_attempt_at":`) && !d.time(&rec.NextAttemptAt) {
		return false
	}
	rec.Depth = 0
	if d.key(`,"depth":`) && !d.int(&rec.Depth) {
		return false
	}
	if !d.key(`}`) || d.i != len(d.v) {
		return false
	}
	rec.Report = nil
	rec.MinIntervalMs = nil
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

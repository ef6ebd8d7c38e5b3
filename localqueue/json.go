package localqueue

import (
	"slices"
	"strconv"

	"downloader"
)

// encodeQueueRecord is json.Marshal(rec), byte for byte, written by hand: every Submit,
// Lease and Report rewrites a task's record, and reflection over the record (with the
// time fields' MarshalJSON) was the largest part of the queue's CPU. The report is
// Report.AppendJSON's; a string or time that needs more than the plain form (escapes, a
// year outside 0..9999) is left to encoding/json by the root package's helpers, so the
// output stays exactly what json.Marshal gives (the table test in queue_json_test.go
// compares the two). It appends to b.
func encodeQueueRecord(b []byte, rec *queueRecord) ([]byte, error) {
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
		if b, err = rec.Report.AppendJSON(b); err != nil {
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

package localqueue

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"downloader"
)

func TestEncodeQueueRecordIsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890123000, time.UTC)
	ms := int64(1500)
	zero := int64(0)
	status, n := 200, 1234
	fail := downloader.FailReason("http_status_error")
	var buf []byte // reused from case to case, as putRecord reuses its buffers
	for _, tc := range []struct {
		name string
		rec  queueRecord
	}{
		{"zero record", queueRecord{}},
		{"pending", queueRecord{Task: downloader.Task{TaskID: "t-1", URL: "http://a.test/x?q=1", Domain: "a.test", MinIntervalMs: &ms, ShouldStore: true}, Seq: 7, State: "pending", SubmittedAt: at}},
		{"leased, zero interval, render", queueRecord{Task: downloader.Task{TaskID: "t-2", URL: "https://b.test/", Domain: "b.test", MinIntervalMs: &zero, ShouldRender: true, LeaseExpiresAt: at.Add(time.Minute)}, Seq: 1 << 40, State: "leased", SubmittedAt: at, LeaseCount: 3, AttemptCount: 2, OwnFailureCount: 1}},
		{"escapes: HTML, quotes, control, non-ASCII, invalid UTF-8", queueRecord{Task: downloader.Task{TaskID: "a\"b\\c", URL: "http://x.test/?a=<b>&c=\u2028\x01", Domain: "bücher.test\xff"}, State: "pending"}},
		{"zone and monotonic reading", queueRecord{SubmittedAt: time.Now(), Task: downloader.Task{LeaseExpiresAt: at.In(time.FixedZone("x", 5*3600+1800))}}},
		{"retry backoff", queueRecord{State: "pending", NextAttemptAt: at.Add(time.Nanosecond)}},
		{"done with a report", queueRecord{State: "done", Report: &downloader.Report{TaskID: "t-3", Summary: downloader.Summary{Domain: "c.test", HTTPStatus: &status, TextLength: &n, FailReason: &fail}, FetchedAt: at, PageKey: "ab"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(&tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeQueueRecord(buf[:0], &tc.rec)
			buf = got
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("encodeQueueRecord =\n%s, %v\njson.Marshal =\n%s", got, err, want)
			}
		})
	}
	// A year or a zone json refuses is refused alike.
	for _, bad := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), at.In(time.FixedZone("far", 25*3600))} {
		rec := queueRecord{SubmittedAt: bad}
		if _, err := encodeQueueRecord(nil, &rec); err == nil {
			t.Fatalf("%v encoded", bad)
		}
	}
}

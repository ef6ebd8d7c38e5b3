package localqueue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"downloader"
)

func TestEncodeQueueRecordReadsBack(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890123000, time.UTC)
	ms := int64(1500)
	zero := int64(0)
	status, n := 200, 1234
	fail := downloader.FailReason("http_status_error")
	h11 := "1.1"
	var buf []byte // reused from case to case, as putRecord reuses its buffers
	for _, tc := range []struct {
		name string
		rec  queueRecord
	}{
		{"zero record", queueRecord{}},
		{"request headers", queueRecord{Task: downloader.Task{TaskID: "t-9", URL: "http://a.test/", Domain: "a.test", MinIntervalMs: &ms, RequestHeaders: downloader.RequestHeaders{"Cookie": "a=b"}}, State: "pending", SubmittedAt: at}},
		{"pending", queueRecord{Task: downloader.Task{TaskID: "t-1", URL: "http://a.test/x?q=1", Domain: "a.test", MinIntervalMs: &ms, ShouldStore: true}, Seq: 7, State: "pending", SubmittedAt: at}},
		{"leased, zero interval, render", queueRecord{Task: downloader.Task{TaskID: "t-2", URL: "https://b.test/", Domain: "b.test", MinIntervalMs: &zero, ShouldRender: true, LeaseExpiresAt: at.Add(time.Minute)}, Seq: 1 << 40, State: "leased", SubmittedAt: at, LeaseCount: 3, AttemptCount: 2, OwnFailureCount: 1}},
		{"escapes: HTML, quotes, control, non-ASCII, invalid UTF-8", queueRecord{Task: downloader.Task{TaskID: "a\"b\\c", URL: "http://x.test/?a=<b>&c=\u2028\x01", Domain: "bücher.test\xff"}, State: "pending"}},
		{"zone and monotonic reading", queueRecord{SubmittedAt: time.Now(), Task: downloader.Task{LeaseExpiresAt: at.In(time.FixedZone("x", 5*3600+1800))}}},
		{"retry backoff", queueRecord{State: "pending", NextAttemptAt: at.Add(time.Nanosecond)}},
		{"discovered, depth", queueRecord{Task: downloader.Task{TaskID: "t-4", URL: "http://d.test/a", Domain: "d.test", MinIntervalMs: &ms, ShouldStore: true}, Seq: 9, State: "pending", SubmittedAt: at, Depth: 3}},
		{"depth and backoff", queueRecord{State: "pending", NextAttemptAt: at.Add(time.Nanosecond), Depth: 1}},
		{"done with a report", queueRecord{State: "done", Report: &downloader.Report{TaskID: "t-3", Summary: downloader.Summary{Domain: "c.test", HTTPStatus: &status, TextLength: &n, FailReason: &fail}, FetchedAt: at, PageKey: "ab"}}},
		{"done with a plain fetch's report", queueRecord{Task: downloader.Task{TaskID: "t-5", URL: "http://e.test/", Domain: "e.test", MinIntervalMs: &ms}, Seq: 5, State: "done", SubmittedAt: at, LeaseCount: 1, AttemptCount: 1,
			Report: &downloader.Report{TaskID: "t-5", Summary: downloader.Summary{Domain: "e.test", HTTPStatus: &status, RawTextLength: &n,
				HealthSignal: &downloader.HealthSignal{ElapsedMs: 20, BodyBytes: 900, ContentType: "text/html", HTTPVersion: &h11}, HasReachedOrigin: true}, FetchedAt: at}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(&tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeQueueRecord(buf[:0], &tc.rec)
			buf = got
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.rec.RequestHeaders) > 0 {
				if !bytes.Equal(got, want) {
					t.Fatalf("encodeQueueRecord =\n%s\njson.Marshal =\n%s", got, want)
				}
				return
			}
			// Zero fields left out, the report in its stored form: the record reads back as
			// json.Marshal's full form (an earlier version's) does.
			var fromGot, fromWant queueRecord
			if err := decodeQueueRecord(got, &fromGot); err != nil {
				t.Fatalf("decode %s: %v", got, err)
			}
			if err := json.Unmarshal(want, &fromWant); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fromGot, fromWant) {
				t.Fatalf("encodeQueueRecord = %s reads as\n%+v\njson.Marshal's as\n%+v", got, fromGot, fromWant)
			}
			if len(got) > len(want) {
				t.Fatalf("encodeQueueRecord = %d bytes, json.Marshal's %d", len(got), len(want))
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

func TestAppendStoredCountsReadsBack(t *testing.T) {
	many := map[downloader.FailReason]int{}
	for i, r := range []downloader.FailReason{downloader.FailConnectTimeout, downloader.FailHTTPStatusError,
		downloader.FailInvalidTask, downloader.FailConnectionReset, downloader.FailResponseTimeout} {
		many[r] = i + 1
	}
	for i := range 20 { // more reasons than the encoder's stack array holds
		many[downloader.FailReason(fmt.Sprintf("reason_%02d", i))] = i
	}
	for _, tc := range []struct {
		name string
		c    Counts
	}{
		{"zero, nil map", Counts{}},
		{"empty map, pending and leased left out", Counts{PendingCount: 5, LeasedCount: 2, FailedCount: map[downloader.FailReason]int{}}},
		{"every field", Counts{DoneCount: 9, SucceededCount: 4, SkippedCount: 1, RetryCount: 7, PageCount: 3,
			FailedCount: map[downloader.FailReason]int{downloader.FailHTTPStatusError: 3, downloader.FailConnectTimeout: 2}}},
		{"many reasons, sorted", Counts{DoneCount: 1, FailedCount: many}},
		{"a reason that needs escaping", Counts{FailedCount: map[downloader.FailReason]int{"a\"<b>": 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What Open reads back: the full form earlier versions wrote, and the stored one.
			full, err := json.Marshal(map[string]any{"done_count": tc.c.DoneCount, "succeeded_count": tc.c.SucceededCount,
				"skipped_count": tc.c.SkippedCount, "retry_count": tc.c.RetryCount, "failed_count": tc.c.FailedCount, "page_count": tc.c.PageCount})
			if err != nil {
				t.Fatal(err)
			}
			got := appendStoredCounts([]byte("x"), &tc.c)[1:]
			var fromGot, fromFull Counts
			if err := json.Unmarshal(got, &fromGot); err != nil {
				t.Fatalf("decode %s: %v", got, err)
			}
			if err := json.Unmarshal(full, &fromFull); err != nil {
				t.Fatal(err)
			}
			want := tc.c
			want.PendingCount, want.LeasedCount = 0, 0
			for _, c := range []*Counts{&fromGot, &fromFull, &want} {
				if len(c.FailedCount) == 0 {
					c.FailedCount = nil // Open makes either an empty map
				}
			}
			if !reflect.DeepEqual(fromGot, want) || !reflect.DeepEqual(fromFull, want) {
				t.Fatalf("appendStoredCounts = %s reads as %+v; the full form %s as %+v; want %+v", got, fromGot, full, fromFull, want)
			}
			if bytes.Contains(got, []byte(`_count":0`)) || bytes.Contains(got, []byte(`:{}`)) {
				t.Fatalf("appendStoredCounts = %s: a zero written", got)
			}
		})
	}
}

func TestDecodeQueueRecordIsJSONUnmarshal(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890123000, time.UTC)
	ms, zero, neg := int64(1500), int64(0), int64(-3)
	status, n := 200, 1234
	fail := downloader.FailReason("http_status_error")
	every := queueRecord{Task: downloader.Task{TaskID: "t-1", URL: "http://a.test/x?q=1", Domain: "a.test", MinIntervalMs: &ms,
		ShouldRender: true, ShouldStore: true, LeaseExpiresAt: at.Add(time.Minute)}, Seq: 1<<64 - 1, State: "leased",
		SubmittedAt: at, LeaseCount: 3, AttemptCount: 2, OwnFailureCount: 1, NextAttemptAt: at.Add(time.Nanosecond)}
	for _, tc := range []struct {
		name    string
		rec     queueRecord
		isPlain bool // read by hand, not through encoding/json
	}{
		{"zero record", queueRecord{}, true},
		{"every field but the report", every, true},
		{"pending, zero interval", queueRecord{Task: downloader.Task{TaskID: "t-2", URL: "https://b.test/", Domain: "b.test", MinIntervalMs: &zero}, Seq: 7, State: "pending", SubmittedAt: at}, true},
		{"negative numbers", queueRecord{Task: downloader.Task{MinIntervalMs: &neg}, LeaseCount: -1, AttemptCount: -2, OwnFailureCount: -3}, true},
		{"zone offset", queueRecord{SubmittedAt: at.In(time.FixedZone("x", 5*3600+1800)), Task: downloader.Task{LeaseExpiresAt: at.In(time.FixedZone("y", -7200))}}, true},
		{"escapes go to encoding/json", queueRecord{Task: downloader.Task{TaskID: "a\"b\\c", URL: "http://x.test/?a=<b>&c=\u2028\x01", Domain: "d.test"}, State: "pending"}, false},
		{"non-ASCII and invalid UTF-8 go to encoding/json", queueRecord{Task: downloader.Task{Domain: "bücher.test\xff"}}, false},
		{"request headers go to encoding/json", queueRecord{Task: downloader.Task{TaskID: "t-4", URL: "http://a.test/", Domain: "a.test", MinIntervalMs: &ms,
			RequestHeaders: downloader.RequestHeaders{"Cookie": "consent=yes", "Accept-Language": "zh-TW"}}, State: "pending", SubmittedAt: at}, false},
		{"a report goes to encoding/json", queueRecord{State: "done", Report: &downloader.Report{TaskID: "t-3", Summary: downloader.Summary{Domain: "c.test", HTTPStatus: &status, TextLength: &n, FailReason: &fail}, FetchedAt: at, PageKey: "ab"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := encodeQueueRecord(nil, &tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			var plain queueRecord
			if got := decodeQueueRecordPlain(v, &plain); got != tc.isPlain {
				t.Fatalf("decodeQueueRecordPlain(%s) = %v, want %v", v, got, tc.isPlain)
			}
			assertDecodesAsJSON(t, v)
			for i := range v { // every value one byte away from it decodes (or fails) alike
				for _, c := range []byte(` 0-9e."\}x,`) {
					w := bytes.Clone(v)
					w[i] = c
					assertDecodesAsJSON(t, w)
				}
				assertDecodesAsJSON(t, v[:i])
			}
		})
	}
	for _, v := range []string{
		`{"task_id":"a","url":"b","domain":"c","min_interval_ms":01,"should_render":false,"should_store":false,"lease_expires_at":"0001-01-01T00:00:00Z","seq":0,"state":"","submitted_at":"0001-01-01T00:00:00Z","lease_count":0,"attempt_count":0,"own_failure_count":0}`,
		`{"task_id":"a","url":"b","domain":"c","min_interval_ms":1e3,"should_render":false,"should_store":false,"lease_expires_at":"0001-01-01T00:00:00Z","seq":0,"state":"","submitted_at":"0001-01-01T00:00:00Z","lease_count":0,"attempt_count":0,"own_failure_count":0}`,
		`{"task_id":"a","url":"b","domain":"c","min_interval_ms":9223372036854775808,"should_render":false,"should_store":false,"lease_expires_at":"0001-01-01T00:00:00Z","seq":18446744073709551616,"state":"","submitted_at":"0001-01-01T00:00:00Z","lease_count":0,"attempt_count":0,"own_failure_count":0}`,
		`{"task_id":"a","url":"b","domain":"c","min_interval_ms":null,"should_render":true,"should_store":false,"lease_expires_at":"2026-13-01T00:00:00Z","seq":-1,"state":"","submitted_at":"0001-01-01T00:00:00Z","lease_count":0,"attempt_count":0,"own_failure_count":0}`,
		`{"url":"b","task_id":"a","seq":5}`,
		`{"task_id":"a","url":"b","domain":"c","min_interval_ms":null,"should_render":false,"should_store":false,"lease_expires_at":"0001-01-01T00:00:00Z","seq":0,"state":"","submitted_at":"0001-01-01T00:00:00Z","lease_count":0,"attempt_count":0,"own_failure_count":0,"next_attempt_at":null}`,
		`{"task_id":"a","url":"b","domain":"c","min_interval_ms":null,"should_render":false,"should_store":false,"lease_expires_at":"0001-01-01T00:00:00Z","seq":0,"state":"","submitted_at":"0001-01-01T00:00:00Z","lease_count":0,"attempt_count":0,"own_failure_count":0} `,
		`null`, ``,
	} {
		assertDecodesAsJSON(t, []byte(v))
	}
}

// assertDecodesAsJSON fails unless decodeQueueRecord(v) and json.Unmarshal(v) agree: both
// fail, or both give the same record field by field.
func assertDecodesAsJSON(t *testing.T, v []byte) {
	t.Helper()
	var got, want queueRecord
	gotErr, wantErr := decodeQueueRecord(v, &got), json.Unmarshal(v, &want)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%s: decodeQueueRecord: %v, json.Unmarshal: %v", v, gotErr, wantErr)
	}
	if gotErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\ndecodeQueueRecord = %+v\njson.Unmarshal    = %+v", v, got, want)
	}
}

package downloader

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestStoredJSONRoundTrip: a report's and a fetch_result's stored form, read back as
// every store reads it (encoding/json into a new value), is the value written, and so is
// the full form earlier versions stored (json.Marshal's); the API then serves the same
// bytes from either. A field added to the types without its stored encoder fails here
// (fillAll sets it).
func TestStoredJSONRoundTrip(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890123000, time.UTC)
	status, n, zero := 200, 1234, 0
	retry := int64(30)
	fail := FailHTTPStatusError
	h11 := "1.1"
	plainSignal := &HealthSignal{ElapsedMs: 21, BodyBytes: 3456, ContentType: "text/html; charset=utf-8", HTTPVersion: &h11}
	renderSignal := &HealthSignal{ElapsedMs: 900, ContentType: "text/html", IsBodyTruncated: true, RetryAfterSeconds: &retry,
		XHRCount: &n, XHRFailedCount: &zero, SubrequestCount: &n, SubrequestFailedCount: &zero, BlockedRequestCount: &zero,
		SkippedRequestCount: &n, PopupCount: &zero, SkippedFrameCount: &zero, CappedSubrequestCount: &n}
	zeroSignal := &HealthSignal{}
	fullReport := func(s string, n int64) *Report {
		var r Report
		fillAll(t, reflect.ValueOf(&r), s, n, at)
		return &r
	}
	fullFetch := func(s string, n int64) *FetchResult {
		var f FetchResult
		fillAll(t, reflect.ValueOf(&f), s, n, at)
		return &f
	}
	plain := Summary{Domain: "a.test", HTTPStatus: &status, RawTextLength: &n, HealthSignal: plainSignal, HasReachedOrigin: true}
	values := []struct {
		name string
		v    interface {
			AppendStoredJSON([]byte) ([]byte, error)
		}
		// maxStoredLen bounds the stored form's length where the case is a task's usual end
		// (0: no bound): the null render counts and fail_reason must not come back.
		maxStoredLen int
	}{
		{"report/zero", &Report{}, 0},
		{"report/plain fetch success", &Report{TaskID: "0000000000000001", Summary: plain, FetchedAt: at, PageKey: "ab12"}, 300},
		{"report/failure, nil pointers", &Report{TaskID: "t-2", Summary: Summary{Domain: "b.test", FailReason: &fail}, FetchedAt: at}, 0},
		{"report/render, zero counts kept", &Report{TaskID: "t-3", Summary: Summary{HTTPStatus: &zero, TextLength: &zero, HealthSignal: renderSignal}, FetchedAt: at}, 0},
		{"report/zero health_signal kept", &Report{Summary: Summary{HealthSignal: zeroSignal}, FetchedAt: at}, 0},
		{"report/skipped", &Report{TaskID: "t-4", Summary: Summary{Domain: "c.test"}, FetchedAt: at, SkipReason: SkipRobotsDisallowed}, 0},
		{"report/every field set", fullReport("x", 7), 0},
		{"report/every field set, zero numbers and strings", fullReport("", 0), 0},
		{"report/escapes, invalid UTF-8", fullReport("<a href=\"x\">&\\\x01\u2028bücher\xff", -1), 0},
		{"report/zone", &Report{FetchedAt: at.In(time.FixedZone("x", -(5*3600 + 1800)))}, 0},
		{"fetch_result/zero", &FetchResult{}, 0},
		{"fetch_result/plain fetch success", &FetchResult{Summary: plain, TaskID: "0000000000000001", URL: "http://a.test/p/1",
			Entry: EntryLease, FetchedAt: at, PageKey: "4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"}, 400},
		{"fetch_result/failure", &FetchResult{Summary: Summary{FailReason: &fail}, TaskID: "t", URL: "http://b.test/", Entry: EntryLease, FetchedAt: at}, 0},
		{"fetch_result/render", &FetchResult{Summary: Summary{HTTPStatus: &status, TextLength: &zero, HealthSignal: renderSignal}, URL: "http://c.test/",
			FinalURL: "http://c.test/x", Entry: EntryRender, FetchedAt: at}, 0},
		{"fetch_result/every field set", fullFetch("y", 3), 0},
		{"fetch_result/every field set, zero", fullFetch("", 0), 0},
		{"fetch_result/escapes", fullFetch("\"\t<>&é\xfe", 5), 0},
	}
	for _, tc := range values {
		t.Run(tc.name, func(t *testing.T) {
			full, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			stored, err := tc.v.AppendStoredJSON([]byte("prefix"))
			if err != nil || !bytes.HasPrefix(stored, []byte("prefix")) {
				t.Fatalf("AppendStoredJSON = %q, %v", stored, err)
			}
			stored = stored[len("prefix"):]
			if bytes.Contains(stored, []byte("null")) {
				t.Errorf("stored form %s holds a null", stored)
			}
			if tc.maxStoredLen > 0 && len(stored) > tc.maxStoredLen {
				t.Errorf("stored form is %d bytes, over %d: %s", len(stored), tc.maxStoredLen, stored)
			}
			// Read back as the stores do, then served as the API serves it.
			fromStored := reflect.New(reflect.TypeOf(tc.v).Elem()).Interface()
			if err := json.Unmarshal(stored, fromStored); err != nil {
				t.Fatalf("decode stored %s: %v", stored, err)
			}
			fromFull := reflect.New(reflect.TypeOf(tc.v).Elem()).Interface()
			if err := json.Unmarshal(full, fromFull); err != nil {
				t.Fatalf("decode full %s: %v", full, err)
			}
			servedStored, _ := json.Marshal(fromStored)
			servedFull, _ := json.Marshal(fromFull)
			if !bytes.Equal(servedStored, servedFull) {
				t.Fatalf("stored form %s\nserves %s\nthe full form serves %s", stored, servedStored, servedFull)
			}
			if !bytes.Equal(servedFull, full) && !bytes.Contains(full, []byte(`\ufffd`)) && tc.name != "report/zone" && tc.name != "report/escapes, invalid UTF-8" {
				t.Fatalf("the full form does not round-trip: %s → %s", full, servedFull)
			}
			t.Logf("%d B stored, %d B full", len(stored), len(full))
		})
	}
	for _, bad := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), at.In(time.FixedZone("far", 25*3600))} {
		if _, err := (&Report{FetchedAt: bad}).AppendStoredJSON(nil); err == nil {
			t.Errorf("report with %v encoded", bad)
		}
		if _, err := (&FetchResult{FetchedAt: bad}).AppendStoredJSON(nil); err == nil {
			t.Errorf("fetch_result with %v encoded", bad)
		}
	}
}

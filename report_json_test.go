package downloader

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// fillAll sets every field of v (a pointer to a struct) to a non-zero value, pointers
// included, so that a field added to a type without its hand encoder shows up as a
// difference from json.Marshal.
func fillAll(t *testing.T, v reflect.Value, s string, n int64, at time.Time) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fillAll(t, v.Elem(), s, n, at)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(at))
			return
		}
		for i := range v.NumField() {
			fillAll(t, v.Field(i), s, n, at)
		}
	case reflect.String:
		v.SetString(s)
	case reflect.Int, reflect.Int64:
		v.SetInt(n)
	case reflect.Bool:
		v.SetBool(true)
	default:
		t.Fatalf("fillAll: a %s field (%s): teach the test and the encoder", v.Kind(), v.Type())
	}
}

func TestReportAppendJSONIsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890123000, time.UTC)
	status, n, zero := 200, 1234, 0
	retry := int64(30)
	fail := FailHTTPStatusError
	full := func(s string, n int64, at time.Time) *Report {
		var r Report
		fillAll(t, reflect.ValueOf(&r), s, n, at)
		return &r
	}
	fullFetch := func(s string, n int64, at time.Time) *FetchResult {
		var f FetchResult
		fillAll(t, reflect.ValueOf(&f), s, n, at)
		return &f
	}
	h2 := "2"
	plainSignal := &HealthSignal{ElapsedMs: 12, BodyBytes: 3456, ContentType: "text/html; charset=utf-8", RedirectCount: 1, HTTPVersion: &h2, IsNotModified: true}
	renderSignal := &HealthSignal{ElapsedMs: 900, ContentType: "text/html", IsBodyTruncated: true, RetryAfterSeconds: &retry,
		XHRCount: &n, XHRFailedCount: &zero, SubrequestCount: &n, SubrequestFailedCount: &zero, BlockedRequestCount: &zero,
		SkippedRequestCount: &n, PopupCount: &zero, SkippedFrameCount: &zero, CappedSubrequestCount: &n}
	reports := []struct {
		name string
		r    *Report
	}{
		{"zero", &Report{}},
		{"success, plain fetch", &Report{TaskID: "t-1", Summary: Summary{Domain: "a.test", HTTPStatus: &status, RawTextLength: &n, TextLength: &n,
			HealthSignal: plainSignal, HasReachedOrigin: true}, FetchedAt: at, PageKey: "ab12"}},
		{"failure, nil pointers", &Report{TaskID: "t-2", Summary: Summary{Domain: "b.test", FailReason: &fail}, FetchedAt: at}},
		{"rendered, every health_signal count, zero counts", &Report{TaskID: "t-3", Summary: Summary{HTTPStatus: &zero, HealthSignal: renderSignal}, FetchedAt: at}},
		{"skipped", &Report{TaskID: "t-4", Summary: Summary{Domain: "c.test"}, FetchedAt: at, SkipReason: SkipRobotsDisallowed}},
		{"every field set", full("x", 7, at)},
		{"every field set, negative numbers", full("x", -9223372036854775808, at)},
		{"escapes: HTML, quotes, control, U+2028, non-ASCII, invalid UTF-8", full("<a href=\"x\">&\\\x01\u2028bücher\xff", 1, at)},
		{"zone and monotonic reading", &Report{FetchedAt: time.Now().In(time.FixedZone("x", -(5*3600 + 1800)))}},
		{"nanoseconds trimmed", &Report{FetchedAt: at.Truncate(time.Millisecond).Add(time.Nanosecond * 100)}},
	}
	var buf []byte // reused from case to case, as the stores append to pooled buffers
	for _, tc := range reports {
		t.Run("report/"+tc.name, func(t *testing.T) {
			want, err := json.Marshal(tc.r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tc.r.AppendJSON(buf[:0])
			buf = got
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("AppendJSON =\n%s, %v\njson.Marshal =\n%s", got, err, want)
			}
		})
	}
	fetches := []struct {
		name string
		f    *FetchResult
	}{
		{"zero", &FetchResult{}},
		{"entry B, no task, redirect", &FetchResult{Summary: Summary{Domain: "a.test", HTTPStatus: &status, HealthSignal: plainSignal, HasReachedOrigin: true},
			URL: "http://a.test/x?q=1", FinalURL: "http://a.test/y", Entry: EntryLease, FetchedAt: at, PageKey: "k"}},
		{"failure, nil pointers", &FetchResult{Summary: Summary{FailReason: &fail}, TaskID: "t", URL: "http://b.test/", Entry: EntryLease, FetchedAt: at}},
		{"every field set", fullFetch("y", 3, at)},
		{"escapes", fullFetch("\"\t<>&é\xfe", 0, at)},
	}
	for _, tc := range fetches {
		t.Run("fetch_result/"+tc.name, func(t *testing.T) {
			want, err := json.Marshal(tc.f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tc.f.AppendJSON(buf[:0])
			buf = got
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("AppendJSON =\n%s, %v\njson.Marshal =\n%s", got, err, want)
			}
		})
	}
	// A year or a zone json refuses is refused alike.
	for _, bad := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), at.In(time.FixedZone("far", 25*3600))} {
		if _, err := json.Marshal(&Report{FetchedAt: bad}); err == nil {
			t.Fatalf("json.Marshal encodes %v: the case is wrong", bad)
		}
		if _, err := (&Report{FetchedAt: bad}).AppendJSON(nil); err == nil {
			t.Fatalf("report with %v encoded", bad)
		}
		if _, err := (&FetchResult{FetchedAt: bad}).AppendJSON(nil); err == nil {
			t.Fatalf("fetch_result with %v encoded", bad)
		}
	}
}

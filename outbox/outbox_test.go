package outbox

import (
	"bytes"
	"downloader/store/embedded/embeddedtest"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/goleak"

	"downloader"
	"downloader/store/embedded"
	"downloader/store/keys"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var queueStart = time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC)

func okReport(id string, at time.Time, page string) *downloader.Report {
	st := 200
	return &downloader.Report{TaskID: id, Summary: downloader.Summary{HTTPStatus: &st, HasReachedOrigin: true}, FetchedAt: at, PageKey: page}
}

func failReport(id string, at time.Time, r downloader.FailReason) *downloader.Report {
	return &downloader.Report{TaskID: id, Summary: downloader.Summary{FailReason: &r, HasReachedOrigin: r.HasReachedOrigin()}, FetchedAt: at}
}

func TestOutbox(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := embedded.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	o := New(s)
	for i := range 5 {
		if err := o.PutReport(ctx, okReport(fmt.Sprintf("t%d", i), queueStart, "")); err != nil {
			t.Fatal(err)
		}
	}
	// A newer report of t1 replaces the older one.
	newer := failReport("t1", queueStart.Add(time.Second), downloader.FailHTTPStatusError)
	if err := o.PutReport(ctx, newer); err != nil {
		t.Fatal(err)
	}
	page, err := o.PendingReports(ctx, "", 2)
	if err != nil || len(page) != 2 || page[0].TaskID != "t0" || page[1].TaskID != "t1" || page[1].FailReason == nil {
		t.Fatalf("first page = %+v, %v", page, err)
	}
	rest, err := o.PendingReports(ctx, page[1].TaskID, 10)
	if err != nil || len(rest) != 3 || rest[0].TaskID != "t2" {
		t.Fatalf("second page = %+v, %v", rest, err)
	}
	// Deleting the older report of t1 leaves the newer one.
	if ok, err := o.DeleteReport(ctx, okReport("t1", queueStart, "")); ok || err != nil {
		t.Fatalf("delete of a replaced report = %v, %v", ok, err)
	}
	if ok, err := o.DeleteReport(ctx, newer); !ok || err != nil {
		t.Fatalf("delete = %v, %v", ok, err)
	}
	if ok, err := o.DeleteReport(ctx, newer); ok || err != nil {
		t.Fatalf("second delete = %v, %v", ok, err)
	}
	if err := o.PutReport(ctx, &downloader.Report{}); downloader.ErrorField(err) != "task_id" {
		t.Fatalf("report without task id: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Durable across a restart.
	o2 := New(embeddedtest.Open(t, dir))
	if n, err := o2.ReportCount(ctx); n != 4 || err != nil {
		t.Fatalf("after restart %d reports, %v; want 4", n, err)
	}
}

// TestOutboxListingFloor checks that the listing floor (where a listing from the start
// begins) never hides a report: puts below a raised floor, deletes of the first reports,
// an emptied outbox and puts after it are all listed.
func TestOutboxListingFloor(t *testing.T) {
	s := embeddedtest.Open(t, filepath.Join(t.TempDir(), "store"))
	ctx := t.Context()
	o := New(s)
	ids := func() []string {
		t.Helper()
		var got []string
		after := ""
		for {
			page, err := o.PendingReports(ctx, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				return got
			}
			for _, r := range page {
				got = append(got, r.TaskID)
			}
			after = page[len(page)-1].TaskID
		}
	}
	put := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			if err := o.PutReport(ctx, okReport(id, queueStart, "")); err != nil {
				t.Fatal(err)
			}
		}
	}
	del := func(ids ...string) {
		t.Helper()
		var rs []downloader.Report
		for _, id := range ids {
			rs = append(rs, *okReport(id, queueStart, ""))
		}
		if err := o.DeleteReports(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		name  string
		do    func()
		want  string
		floor string // the floor's key after the listings
	}{
		{"first puts", func() { put("m", "n", "o", "p") }, "m n o p", outboxPrefix + "m"},
		{"first two deleted: the floor rises to o", func() { del("m", "n") }, "o p", outboxPrefix + "o"},
		{"a put below the floor", func() { put("a") }, "a o p", outboxPrefix + "a"},
		{"a put between", func() { put("n2") }, "a n2 o p", outboxPrefix + "a"},
		{"everything deleted", func() { del("a", "n2", "o", "p") }, "", string(keys.PrefixEnd(outboxPrefix))},
		{"puts after the outbox was empty", func() { put("z", "b") }, "b z", outboxPrefix + "b"},
		{"the last deleted", func() { del("z") }, "b", outboxPrefix + "b"},
	} {
		step.do()
		// Twice: the first listing may move the floor, the second starts from it.
		for range 2 {
			if got := strings.Join(ids(), " "); got != step.want {
				t.Fatalf("%s: listed %q, want %q", step.name, got, step.want)
			}
		}
		if !bytes.Equal(o.floor, []byte(step.floor)) {
			t.Fatalf("%s: floor %q, want %q", step.name, o.floor, step.floor)
		}
	}
}

// TestOutboxReadsUnheadedReports: a report stored as bare JSON (before the fetched_at
// header) is listed and deleted as before.
func TestOutboxReadsUnheadedReports(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	o := New(s)
	at := time.Date(2026, 3, 4, 5, 6, 7, 9, time.UTC)
	old := downloader.Report{TaskID: "old", FetchedAt: at}
	v, err := json.Marshal(&old)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.OutboxKeyspace().Set(outboxKey("old"), v, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	rs, err := o.PendingReports(t.Context(), "", 10)
	if err != nil || len(rs) != 1 || rs[0].TaskID != "old" || !rs[0].FetchedAt.Equal(at) {
		t.Fatalf("PendingReports: %+v, %v", rs, err)
	}
	if ok, err := o.DeleteReport(t.Context(), &downloader.Report{TaskID: "old", FetchedAt: at.Add(time.Nanosecond)}); err != nil || ok {
		t.Fatalf("DeleteReport of another fetched_at: %v, %v; want kept", ok, err)
	}
	if err := o.DeleteReports(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	if n, err := o.ReportCount(t.Context()); err != nil || n != 0 {
		t.Errorf("reports left: %d, %v", n, err)
	}
}

func TestReportHeader(t *testing.T) {
	for _, at := range []time.Time{
		{},
		time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.FixedZone("x", 3600)),
	} {
		v, err := encodeReport(&downloader.Report{TaskID: "t", FetchedAt: at})
		if err != nil {
			t.Fatal(err)
		}
		got, err := reportFetchedAt(v)
		if err != nil || !got.Equal(at) {
			t.Errorf("fetched_at %v: read back %v, %v", at, got, err)
		}
		var r downloader.Report
		if err := decodeReport(v, &r); err != nil || r.TaskID != "t" || !r.FetchedAt.Equal(at) {
			t.Errorf("fetched_at %v: decoded %+v, %v", at, r, err)
		}
	}
}

// TestOutboxStoredFormSendsFullReport: a plain fetch's report is stored without its null
// and zero fields, and what PendingReports hands the sender encodes, as the scheduler
// client sends it (json.Marshal), to the very bytes of the report put: every field, the
// render-only counts' nulls included (SPEC §3). A report stored in full by an earlier
// version reads the same.
func TestOutboxStoredFormSendsFullReport(t *testing.T) {
	s := embeddedtest.Open(t, t.TempDir())
	o := New(s)
	status, raw, h11 := 200, 812, "1.1"
	put := &downloader.Report{TaskID: "plain", Summary: downloader.Summary{Domain: "a.test", HTTPStatus: &status, RawTextLength: &raw,
		HealthSignal: &downloader.HealthSignal{ElapsedMs: 21, BodyBytes: 2048, ContentType: "text/html", HTTPVersion: &h11}, HasReachedOrigin: true},
		FetchedAt: queueStart}
	want, err := json.Marshal(put)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.PutReport(t.Context(), put); err != nil {
		t.Fatal(err)
	}
	stored, ok, err := s.OutboxKeyspace().Get(outboxKey("plain"))
	if err != nil || !ok {
		t.Fatalf("stored report: %v, %v", ok, err)
	}
	if bytes.Contains(stored, []byte("null")) || len(stored) >= len(want) {
		t.Errorf("stored form (%d B) %s; the full form is %d B", len(stored), stored, len(want))
	}
	// As an earlier version stored it: the header, then json.Marshal's bytes.
	full := append(append([]byte(nil), stored[:reportHeaderLen]...), want...)
	if err := s.OutboxKeyspace().Set(outboxKey("full"), full, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	rs, err := o.PendingReports(t.Context(), "", 10)
	if err != nil || len(rs) != 2 {
		t.Fatalf("PendingReports: %+v, %v", rs, err)
	}
	for _, r := range rs {
		r.TaskID = "plain"
		got, err := json.Marshal(&r)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("sent %s, %v\nwant %s", got, err, want)
		}
	}
}

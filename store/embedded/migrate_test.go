package embedded

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/store/keys"
)

// TestMigrateOldKeyNames writes a data directory the way a build before the current key
// names did (by moving current keys back to the old names), opens it again, and checks
// that every setting, result (by id and by domain) and pending report is found under the
// current names and nothing is left under the old ones.
func TestMigrateOldKeyNames(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	if err := s.SaveSettings(ctx, downloader.Settings{MaxConcurrentCount: 41}); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		r := &downloader.FetchResult{Summary: downloader.Summary{Domain: []string{"a.example", "::1"}[i%2]},
			URL: "http://a.example/", FetchedAt: at.Add(time.Duration(i) * time.Second)}
		if err := s.PutFetchResult(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// Two reports of the outbox (package outbox, which keeps its table in this store):
	// its values are its own, so they are written here as opaque bytes.
	reports := map[string]string{"task-1": `{"task_id":"task-1"}`, "task:2": `{"task_id":"task:2"}`}
	for id, v := range reports {
		if err := s.OutboxKeyspace().Set([]byte(ReportOutboxPrefix+id), []byte(v), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	wantAll, _, err := s.FetchResults(ctx, "", 100, "")
	if err != nil {
		t.Fatal(err)
	}
	wantV6, _, err := s.FetchResults(ctx, "::1", 100, "")
	if err != nil {
		t.Fatal(err)
	}
	// Back to the old layout.
	for _, m := range []keyMove{
		{from: keys.Settings, to: oldSettings, match: func(rest []byte) bool { return len(rest) == 0 }},
		{from: keys.FetchResult, to: oldFetchResult, match: isID},
		{from: keys.FetchResultByDomain, to: oldByDomain, match: anyRest},
		{from: ReportOutboxPrefix, to: oldReportOutbox, match: anyRest},
	} {
		if n, err := s.moveKeys(m); err != nil || n == 0 {
			t.Fatalf("moveKeys(%s → %s) = %d, %v", m.from, m.to, n, err)
		}
	}
	if got := countPrefix(t, s, "downloader:fetch_result:id:"); got != 0 {
		t.Fatalf("%d records left under the new name before the reopen", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTest(t, dir)
	st, ok, err := s.Settings(ctx)
	if err != nil || !ok || st.MaxConcurrentCount != 41 {
		t.Errorf("Settings after the move = %+v, %v, %v; want 41", st, ok, err)
	}
	gotAll, _, err := s.FetchResults(ctx, "", 100, "")
	if err != nil {
		t.Fatal(err)
	}
	gotV6, _, err := s.FetchResults(ctx, "::1", 100, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(gotAll) != len(wantAll) || len(gotV6) != len(wantV6) || len(wantV6) != 12 {
		t.Fatalf("results after the move: %d all, %d for ::1; want %d, %d (12)", len(gotAll), len(gotV6), len(wantAll), len(wantV6))
	}
	for i := range wantAll {
		if !gotAll[i].FetchedAt.Equal(wantAll[i].FetchedAt) || gotAll[i].Domain != wantAll[i].Domain {
			t.Errorf("result %d after the move = %v %s, want %v %s", i, gotAll[i].FetchedAt, gotAll[i].Domain, wantAll[i].FetchedAt, wantAll[i].Domain)
		}
	}
	if got := countPrefix(t, s, ReportOutboxPrefix); got != len(reports) {
		t.Errorf("pending reports after the move = %d; want %d", got, len(reports))
	}
	for id, want := range reports {
		if v, ok, err := s.OutboxKeyspace().Get([]byte(ReportOutboxPrefix + id)); err != nil || !ok || string(v) != want {
			t.Errorf("report %s after the move = %q, %v, %v; want %q", id, v, ok, err, want)
		}
	}
	for _, old := range []string{oldSettings, oldFetchResult, oldByDomain, oldReportOutbox} {
		n := 0
		for _, k := range allKeys(t, s) {
			if strings.HasPrefix(k, old) && (old != oldFetchResult || isID([]byte(k[len(old):]))) {
				n++
			}
		}
		if n != 0 {
			t.Errorf("%d keys left under %s", n, old)
		}
	}
	// A second open has nothing to move and changes nothing.
	if n, err := s.moveKeys(keyMove{from: oldByDomain, to: keys.FetchResultByDomain, match: anyRest}); n != 0 || err != nil {
		t.Errorf("second move = %d, %v; want 0, nil", n, err)
	}
}

func allKeys(t *testing.T, s *Store) []string {
	t.Helper()
	iter, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for ok := iter.First(); ok; ok = iter.Next() {
		out = append(out, string(iter.Key()))
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func countPrefix(t *testing.T, s *Store, prefix string) int {
	n := 0
	for _, k := range allKeys(t, s) {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

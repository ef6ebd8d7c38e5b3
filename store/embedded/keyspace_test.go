package embedded

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestKeyspaceBounds: a keyspace's point operations and iterators stay under its prefix,
// so that a package keeping its table here cannot touch the store's own tables.
func TestKeyspaceBounds(t *testing.T) {
	s := openTest(t, t.TempDir())
	ks := s.OutboxKeyspace()
	in, out := []byte(ReportOutboxPrefix+"t1"), []byte(LocalQueuePrefix+"task:t1")
	if err := ks.Set(in, []byte("v"), pebble.NoSync); err != nil {
		t.Fatalf("Set inside: %v", err)
	}
	if err := ks.Set(out, []byte("v"), pebble.NoSync); err == nil {
		t.Errorf("Set of %q outside the keyspace succeeded", out)
	}
	if _, _, err := ks.Get(out); err == nil {
		t.Errorf("Get of %q outside the keyspace succeeded", out)
	}
	if err := ks.Delete([]byte("config:downloader:global"), pebble.NoSync); err == nil {
		t.Error("Delete outside the keyspace succeeded")
	}
	if v, ok, err := ks.Get(in); err != nil || !ok || string(v) != "v" {
		t.Errorf("Get inside = %q, %v, %v", v, ok, err)
	}
	end := prefixEnd(ReportOutboxPrefix)
	for _, tc := range []struct {
		name         string
		lower, upper []byte
		ok           bool
	}{
		{"the whole keyspace", []byte(ReportOutboxPrefix), end, true},
		{"empty, at its end", end, end, true},
		{"from a key", in, end, true},
		{"lower below the prefix", []byte("lease:"), end, false},
		{"upper past its end", []byte(ReportOutboxPrefix), []byte("lease:zz"), false},
		{"upper below lower", in, []byte(ReportOutboxPrefix), false},
	} {
		iter, err := ks.NewIter(t.Context(), tc.lower, tc.upper)
		if (err == nil) != tc.ok {
			t.Errorf("%s: NewIter error %v, want ok=%v", tc.name, err, tc.ok)
		}
		if iter != nil {
			if err := iter.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

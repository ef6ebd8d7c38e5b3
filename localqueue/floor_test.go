package localqueue

import (
	"downloader/clock/clocktest"
	"downloader/store/embedded/embeddedtest"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"downloader"

	"downloader/store/keys"
)

// checkPendingIndex fails t unless the in-memory index and this process's leases hold
// exactly the stored pending index: every domain's tasks are its stored entries (seq and
// id) but those of the tasks leased now, every leased task has its entry (a lease is in
// memory only: after a crash the entry makes it pending), the counts match, and no
// domain the queue does not know of has an entry. A task missing from memory would never
// be leased; one in memory only would be leased from nothing.
func checkPendingIndex(t *testing.T, q *Queue, step string) {
	t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	iter, err := q.ks.NewIter(t.Context(), []byte(queuePendPrefix), keys.PrefixEnd(queuePendPrefix))
	if err != nil {
		t.Fatal(err)
	}
	defer iter.Close()
	entries := map[string][]string{}
	leasedStored := map[string]bool{}
	for ok := iter.First(); ok; ok = iter.Next() {
		k := string(iter.Key()[len(queuePendPrefix):])
		i := strings.LastIndexByte(k, ':')
		var seq uint64
		if _, err := fmt.Sscanf(k[i+1:], "%x", &seq); err != nil {
			t.Fatalf("%s: key %q: %v", step, iter.Key(), err)
		}
		name := keys.UnescapeDomain(k[:i])
		if l, ok := q.leased[string(iter.Value())]; ok {
			if l.rec.Seq != seq || l.rec.Domain != name {
				t.Fatalf("%s: leased %s (%s, %d) has the pending entry %q", step, iter.Value(), l.rec.Domain, l.rec.Seq, iter.Key())
			}
			leasedStored[string(iter.Value())] = true
			continue
		}
		entries[name] = append(entries[name], fmt.Sprintf("%d=%s", seq, iter.Value()))
	}
	for id := range q.leased {
		if !leasedStored[id] {
			t.Fatalf("%s: leased %s has no stored pending entry: a crash would lose it", step, id)
		}
	}
	total := 0
	for name, stored := range entries {
		d := q.domains[name]
		if d == nil {
			t.Fatalf("%s: %s has pending entries %v but the queue does not know the domain", step, name, stored)
		}
		var mem []string
		for _, seq := range d.tasks {
			mem = append(mem, fmt.Sprintf("%d=%s", seq, q.taskIDLocked(seq)))
		}
		slices.Sort(mem)
		slices.Sort(stored)
		if !slices.Equal(mem, stored) {
			t.Fatalf("%s: %s holds %v in memory, %v stored", step, name, mem, stored)
		}
		if d.tasks[0] != slices.Min(d.tasks) {
			t.Fatalf("%s: %s's first task %d is not its lowest seq", step, name, d.tasks[0])
		}
		total += len(stored)
	}
	for name, d := range q.domains {
		if len(entries[name]) == 0 {
			t.Fatalf("%s: %s counts %d pending, has no entry", step, name, d.pending())
		}
	}
	for seq := range q.otherIDs {
		found := false
		for _, d := range q.domains {
			found = found || slices.Contains(d.tasks, seq)
		}
		if !found {
			t.Fatalf("%s: otherIDs holds %d, which no domain has pending", step, seq)
		}
	}
	if want := total + q.retries.Len(); q.counts.PendingCount != want {
		t.Fatalf("%s: pending_count %d, want %d (index entries and retries)", step, q.counts.PendingCount, want)
	}
}

// TestQueuePendingFloor: whatever puts a task back before a domain's others (a release, a
// retry in place, an expired lease, a backoff's end, a submit after the domain drained, a
// restart), no task is hidden: after every step the in-memory index is the stored one,
// first submitted first, and at the end every unfinished task is leased again, with or
// without a restart of the queue before.
func TestQueuePendingFloor(t *testing.T) {
	type step struct {
		op   string // submit, lease, release, own_failure, backoff, done, expire
		urls []string
		n    int      // lease: how many
		want []string // lease: the URLs handed out, in order (nil: not checked)
	}
	a := func(i int) string { return fmt.Sprintf("http://a.test/%d", i) }
	b := func(i int) string { return fmt.Sprintf("http://b.test/%d", i) }
	tests := []struct {
		name  string
		steps []step
	}{
		{"release below the floor, several leases in one batch", []step{
			{op: "submit", urls: []string{a(1), a(2), a(3), a(4)}},
			{op: "lease", n: 3, want: []string{a(1), a(2), a(3)}},
			{op: "release", urls: []string{a(2)}},
			{op: "release", urls: []string{a(1)}},
			{op: "lease", n: 3, want: []string{a(1), a(2), a(4)}},
		}},
		{"retry in place below the floor", []step{
			{op: "submit", urls: []string{a(1), a(2), a(3)}},
			{op: "lease", n: 2, want: []string{a(1), a(2)}},
			{op: "own_failure", urls: []string{a(1)}},
			{op: "done", urls: []string{a(2)}},
			{op: "lease", n: 1, want: []string{a(1)}},
		}},
		{"expired leases below the floor", []step{
			{op: "submit", urls: []string{a(1), a(2), a(3)}},
			{op: "lease", n: 2, want: []string{a(1), a(2)}},
			{op: "expire"},
			{op: "lease", n: 1, want: []string{a(1)}},
		}},
		{"backoff ends below the floor", []step{
			{op: "submit", urls: []string{a(1), a(2), a(3)}},
			{op: "lease", n: 3},
			{op: "backoff", urls: []string{a(1)}},
			{op: "done", urls: []string{a(3)}},
			{op: "expire"},
			{op: "lease", n: 1, want: []string{a(1)}},
		}},
		{"drained domain: a release, then a submit", []step{
			{op: "submit", urls: []string{a(1), a(2)}},
			{op: "lease", n: 2},
			{op: "done", urls: []string{a(2)}},
			{op: "release", urls: []string{a(1)}},
			{op: "submit", urls: []string{a(3)}},
			{op: "lease", n: 1, want: []string{a(1)}},
			{op: "done", urls: []string{a(1)}},
			{op: "submit", urls: []string{a(4)}},
		}},
		{"two domains interleaved, pending report of an expired lease", []step{
			{op: "submit", urls: []string{a(1), b(1), a(2), b(2), a(3)}},
			{op: "lease", n: 4},
			{op: "expire"},
			{op: "lease", n: 1},
			{op: "done", urls: []string{b(2)}}, // pending again after the expiry: taken as leased
			{op: "release", urls: []string{a(1)}},
			{op: "own_failure", urls: []string{b(1)}},
		}},
	}
	for _, tc := range tests {
		for _, restart := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/restart=%v", tc.name, restart), func(t *testing.T) {
				dir := t.TempDir()
				s := embeddedtest.Open(t, dir)
				clk := clocktest.NewFake(queueStart)
				q := openRetryQueue(t, s, clk)
				ids := map[string]string{}
				finished := map[string]bool{}
				for i, st := range tc.steps {
					name := fmt.Sprintf("step %d (%s %v)", i, st.op, st.urls)
					clk.Advance(time.Millisecond) // a distinct fetched_at per report
					switch st.op {
					case "submit":
						var tasks []downloader.Task
						for _, u := range st.urls {
							task := downloader.Task{URL: u}
							if strings.HasPrefix(u, "http://b.test/") {
								// An id of its own, which the index keeps beside the seq.
								task.TaskID = "own-" + strings.TrimPrefix(u, "http://b.test/")
							}
							tasks = append(tasks, task)
						}
						for _, r := range submit(t, q, tasks...) {
							ids[r.URL] = r.TaskID
						}
					case "lease":
						got := urls(lease(t, q, st.n))
						if len(got) != st.n || (st.want != nil && !slices.Equal(got, st.want)) {
							t.Fatalf("%s: leased %v, want %d: %v", name, got, st.n, st.want)
						}
					case "expire":
						clk.Advance(2 * time.Minute)
					default:
						for _, u := range st.urls {
							var err error
							switch st.op {
							case "release":
								err = q.Release(t.Context(), ids[u], 0)
							case "own_failure":
								err = q.Report(t.Context(), failReport(ids[u], clk.Now(), downloader.FailRendererCrashed))
							case "backoff":
								err = q.Report(t.Context(), statusReport(ids[u], clk.Now(), 503, nil))
							case "done":
								err = q.Report(t.Context(), okReport(ids[u], clk.Now(), ""))
								finished[u] = true
							default:
								t.Fatalf("unknown op %q", st.op)
							}
							if err != nil {
								t.Fatalf("%s: %v", name, err)
							}
						}
					}
					checkPendingIndex(t, q, name)
				}
				if restart {
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					s = embeddedtest.Open(t, dir)
					q = openRetryQueue(t, s, clk)
					checkPendingIndex(t, q, "after the restart")
				}
				clk.Advance(2 * time.Minute) // past every lease and backoff
				var left, want []string
				for {
					more := lease(t, q, 2)
					if len(more) == 0 {
						break
					}
					left = append(left, urls(more)...)
					checkPendingIndex(t, q, "leasing what is left")
				}
				for u := range ids {
					if !finished[u] {
						want = append(want, u)
					}
				}
				slices.Sort(left)
				slices.Sort(want)
				if !slices.Equal(left, want) {
					t.Fatalf("at the end leased %v, want every unfinished task %v", left, want)
				}
			})
		}
	}
}

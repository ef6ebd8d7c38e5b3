package localqueue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPendingHeap drives a domain's pending heap with pushes (some below every seq held:
// a task put back), pops and removals, against a sorted slice: pop always gives the lowest
// seq, remove finds exactly what is held.
func TestPendingHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h pendingHeap
	var want []uint64
	for step := range 5000 {
		switch op := rng.IntN(10); {
		case op < 5:
			seq := rng.Uint64N(200)
			if slices.Contains(want, seq) {
				continue // seqs are unique in a domain
			}
			h.push(newPendingTask(seq, ""))
			want = append(want, seq)
			slices.Sort(want)
		case op < 8 && len(want) > 0:
			if got := h.pop().seq; got != want[0] {
				t.Fatalf("step %d: pop = %d, want %d", step, got, want[0])
			}
			want = want[1:]
		default:
			seq := rng.Uint64N(200)
			i, held := slices.BinarySearch(want, seq)
			if got := h.remove(seq); got != held {
				t.Fatalf("step %d: remove(%d) = %v, want %v", step, seq, got, held)
			}
			if held {
				want = slices.Delete(want, i, i+1)
			}
		}
		if len(h) != len(want) {
			t.Fatalf("step %d: %d held, want %d", step, len(h), len(want))
		}
	}
}

// TestPendingTaskID: a task whose id is the queue's own form of its seq keeps no id bytes
// and gives the same id back; any other id is kept as given.
func TestPendingTaskID(t *testing.T) {
	for _, tc := range []struct {
		seq    uint64
		id     string
		stored string // what the entry keeps
	}{
		{1, "0000000000000001", ""},
		{0xdeadbeef, "00000000deadbeef", ""},
		{1<<64 - 1, "ffffffffffffffff", ""},
		{10, "000000000000000A", "000000000000000A"}, // upper case: another id
		{2, "0000000000000001", "0000000000000001"},  // another seq's form
		{3, "my-task", "my-task"},
	} {
		p := newPendingTask(tc.seq, tc.id)
		if p.id != tc.stored || p.taskID() != tc.id {
			t.Errorf("newPendingTask(%d, %q) keeps %q, gives %q; want %q, %q", tc.seq, tc.id, p.id, p.taskID(), tc.stored, tc.id)
		}
		if got, want := defaultTaskID(tc.seq), fmt.Sprintf("%016x", tc.seq); got != want {
			t.Errorf("defaultTaskID(%d) = %q, want %q", tc.seq, got, want)
		}
	}
}

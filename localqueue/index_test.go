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
			h.push(seq)
			want = append(want, seq)
			slices.Sort(want)
		case op < 8 && len(want) > 0:
			if got := h.pop(); got != want[0] {
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

// TestPendingTaskID: a task whose id is the queue's own form of its seq keeps no id in
// memory and gets the same id back; any other id is kept as given, until its task leaves
// the pending index.
func TestPendingTaskID(t *testing.T) {
	q := &Queue{otherIDs: map[uint64]string{}}
	for _, tc := range []struct {
		seq     uint64
		id      string
		isOther bool // kept in otherIDs
	}{
		{1, "0000000000000001", false},
		{0xdeadbeef, "00000000deadbeef", false},
		{1<<64 - 1, "ffffffffffffffff", false},
		{10, "000000000000000A", true}, // upper case: another id
		{2, "0000000000000001", true},  // another seq's form
		{3, "my-task", true},
	} {
		q.noteIDLocked(tc.seq, []byte(tc.id))
		_, isOther := q.otherIDs[tc.seq]
		if got := q.taskIDLocked(tc.seq); got != tc.id || isOther != tc.isOther {
			t.Errorf("seq %d, id %q: gives back %q, kept in otherIDs %v; want %v", tc.seq, tc.id, got, isOther, tc.isOther)
		}
		if got, want := defaultTaskID(tc.seq), fmt.Sprintf("%016x", tc.seq); got != want {
			t.Errorf("defaultTaskID(%d) = %q, want %q", tc.seq, got, want)
		}
	}
}

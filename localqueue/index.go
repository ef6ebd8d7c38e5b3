package localqueue

import (
	"container/heap"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"downloader/store/keys"
)

// The in-memory index. Each domain with pending tasks keeps their seqs, 8 B per queued
// task, in a heap (first submitted first); a task's id is its seq's own form
// (defaultTaskID) unless the queue's map of other ids has it (a task submitted with an id
// of its own), and the domains are in a heap by the time their next task is due: a
// lease takes the earliest due domain's first task in O(log n) and reads from Pebble only
// the record it hands out, never an iterator and never a record it does not hand out; the
// first lease of a task submitted by this process reads nothing while the queue keeps
// that record from the submit (Config.FreshRecordCount of them, the first submitted).
// Pebble stays the truth: the index is rebuilt from the pending index keys on open, and
// every change to it follows a committed batch that made the same change in Pebble.

// liveLease is a lease this process handed out: its expiry and the task record as Lease
// stored it, which Report uses instead of reading it back. Only leased tasks (at most the
// lease loop's held count) keep one.
type liveLease struct {
	expiresAt time.Time
	rec       *queueRecord
}

// queueDomain is one domain with pending tasks.
type queueDomain struct {
	name   string
	tasks  pendingHeap // its pending tasks, first submitted first
	nextAt time.Time   // when its next task is due (the previous one's due time + interval)
	index  int         // in ready
}

// pending counts the domain's pending tasks.
func (d *queueDomain) pending() int { return len(d.tasks) }

// loadPending rebuilds the in-memory index from the pending index keys. Requires q.mu held.
func (q *Queue) loadPending(ctx context.Context) error {
	iter, err := q.ks.NewIter(ctx, []byte(queuePendPrefix), keys.PrefixEnd(queuePendPrefix))
	if err != nil {
		return fmt.Errorf("local queue: scan pending: %w", err)
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		k := string(iter.Key()[len(queuePendPrefix):])
		i := strings.LastIndexByte(k, ':')
		if i < 0 {
			_ = iter.Close()
			return fmt.Errorf("local queue: unexpected key %q", iter.Key())
		}
		seq, err := strconv.ParseUint(k[i+1:], 16, 64)
		if err != nil {
			_ = iter.Close()
			return fmt.Errorf("local queue: unexpected key %q", iter.Key())
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			_ = iter.Close()
			return fmt.Errorf("local queue: scan pending: %w", err)
		}
		d := q.domainLocked(keys.UnescapeDomain(k[:i]))
		// Keys are in seq order within a domain: appending keeps the heap sorted.
		d.tasks = append(d.tasks, seq)
		q.noteIDLocked(seq, v)
		q.counts.PendingCount++
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("local queue: scan pending: %w", err)
	}
	for _, d := range q.domains {
		heap.Push(&q.ready, d)
	}
	return nil
}

// addPendingLocked adds the pending task id (of seq) of domain to the in-memory index, its
// index entry written and committed, due no earlier than notBefore. Requires q.mu held.
func (q *Queue) addPendingLocked(domain string, seq uint64, id string, notBefore time.Time) {
	d := q.domainLocked(domain)
	d.tasks.push(seq)
	q.noteIDLocked(seq, []byte(id))
	if h, ok := q.holds[domain]; ok {
		if h.After(q.clk.Now()) {
			notBefore = later(notBefore, h)
		} else {
			delete(q.holds, domain)
		}
	}
	if notBefore.After(d.nextAt) {
		d.nextAt = notBefore
	}
	if d.index < 0 {
		heap.Push(&q.ready, d)
	} else {
		heap.Fix(&q.ready, d.index)
	}
}

// domainLocked returns domain's state, creating it. Requires q.mu held.
func (q *Queue) domainLocked(domain string) *queueDomain {
	d := q.domains[domain]
	if d == nil {
		d = &queueDomain{name: domain, index: -1}
		q.domains[domain] = d
	}
	return d
}

// dropIfEmptyLocked puts d back in its place in the ready heap, or forgets it once it has
// no pending task. Requires q.mu held.
func (q *Queue) dropIfEmptyLocked(d *queueDomain) {
	if d.pending() > 0 {
		if d.index >= 0 {
			heap.Fix(&q.ready, d.index)
		}
		return
	}
	if d.index >= 0 {
		heap.Remove(&q.ready, d.index)
	}
	delete(q.domains, d.name)
}

// noteIDLocked remembers id as the id of the pending task of seq when it is not the seq's
// own form (defaultTaskID). Requires q.mu held.
func (q *Queue) noteIDLocked(seq uint64, id []byte) {
	var buf [16]byte
	if string(appendTaskID(buf[:0], seq)) != string(id) {
		q.otherIDs[seq] = string(id)
	}
}

// taskIDLocked is the id of the pending task of seq. Requires q.mu held.
func (q *Queue) taskIDLocked(seq uint64) string {
	if id, ok := q.otherIDs[seq]; ok {
		return id
	}
	return defaultTaskID(seq)
}

// pendingHeap is a domain's pending tasks' seqs, a min-heap: the first submitted is the
// first handed out, and a task put back (a release, a retry in place, an expired lease)
// is first again. Written out rather than through container/heap, whose Push and Pop box
// each element.
type pendingHeap []uint64

func (h *pendingHeap) push(t uint64) {
	*h = append(*h, t)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] <= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

// pop removes and returns the lowest seq; h must not be empty.
func (h *pendingHeap) pop() uint64 {
	s := *h
	t := s[0]
	h.removeAt(0)
	return t
}

// remove removes the task of seq, reporting whether it was there. It scans the heap: it
// serves only a report of a task that is pending again, which is rare.
func (h *pendingHeap) remove(seq uint64) bool {
	for i, t := range *h {
		if t == seq {
			h.removeAt(i)
			return true
		}
	}
	return false
}

func (h *pendingHeap) removeAt(i int) {
	s := *h
	n := len(s) - 1
	s[i] = s[n]
	s = s[:n]
	*h = s
	if i == n {
		return
	}
	// Down, then up: the element moved to i may be larger or smaller than its new parent.
	j := i
	for {
		l := 2*j + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s[r] < s[l] {
			m = r
		}
		if s[j] <= s[m] {
			break
		}
		s[j], s[m] = s[m], s[j]
		j = m
	}
	for j > 0 {
		p := (j - 1) / 2
		if s[p] <= s[j] {
			break
		}
		s[p], s[j] = s[j], s[p]
		j = p
	}
}

// domainHeap orders domains by nextAt.
type domainHeap []*queueDomain

func (h domainHeap) Len() int { return len(h) }

func (h domainHeap) Less(i, j int) bool {
	if !h[i].nextAt.Equal(h[j].nextAt) {
		return h[i].nextAt.Before(h[j].nextAt)
	}
	return h[i].name < h[j].name
}

func (h domainHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *domainHeap) Push(x any) {
	d := x.(*queueDomain)
	d.index = len(*h)
	*h = append(*h, d)
}

func (h *domainHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.index = -1
	return d
}

type leaseEntry struct {
	taskID    string
	expiresAt time.Time
}

// leaseHeap orders leases by expiry.
type leaseHeap []leaseEntry

func (h leaseHeap) Len() int { return len(h) }

func (h leaseHeap) Less(i, j int) bool { return h[i].expiresAt.Before(h[j].expiresAt) }

func (h leaseHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

func (h *leaseHeap) Push(x any) { *h = append(*h, x.(leaseEntry)) }

func (h *leaseHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// loadRetries rebuilds the retry heap from the index. Requires q.mu held.
func (q *Queue) loadRetries(ctx context.Context) error {
	iter, err := q.ks.NewIter(ctx, []byte(queueRetrPrefix), keys.PrefixEnd(queueRetrPrefix))
	if err != nil {
		return fmt.Errorf("local queue: scan retries: %w", err)
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		v, err := iter.ValueAndErr()
		if err != nil || len(v) < 8 {
			_ = iter.Close()
			return fmt.Errorf("local queue: retry entry %q: %v", iter.Key(), err)
		}
		q.retries = append(q.retries, retryEntry{
			taskID: string(iter.Key()[len(queueRetrPrefix):]),
			domain: string(v[8:]),
			at:     time.Unix(0, int64(binary.BigEndian.Uint64(v[:8]))),
		})
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("local queue: scan retries: %w", err)
	}
	heap.Init(&q.retries)
	return nil
}

// holdLocked keeps domain's tasks back until at. Requires q.mu held.
func (q *Queue) holdLocked(domain string, at time.Time) {
	q.holds[domain] = later(q.holds[domain], at)
	if d := q.domains[domain]; d != nil && at.After(d.nextAt) {
		d.nextAt = at
		if d.index >= 0 {
			heap.Fix(&q.ready, d.index)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

type retryEntry struct {
	taskID string
	domain string
	at     time.Time
}

// retryHeap orders waiting retries by next_attempt_at.
type retryHeap []retryEntry

func (h retryHeap) Len() int { return len(h) }

func (h retryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }

func (h retryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

func (h *retryHeap) Push(x any) { *h = append(*h, x.(retryEntry)) }

func (h *retryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

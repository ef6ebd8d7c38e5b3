package localqueue

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/store/embedded"
	"downloader/store/keys"
)

// Keys. The queue persists in the embedded store's Pebble database, in the keyspace the
// store hands it (embedded.LocalQueuePrefix):
//
//	local_queue:meta:seq
//	    The last task sequence number handed out, 8 bytes big-endian.
//	local_queue:meta:counts
//	    The counts no index gives back (Counts without pending_count and leased_count),
//	    JSON without the zero ones (appendStoredCounts), rewritten in the same batch as
//	    every report that changes them.
//	local_queue:task:{task_id}
//	    One task record, JSON without its zero and null fields (encodeQueueRecord): the
//	    task, its sequence number, its state (pending, done, skipped), the leases that
//	    ended and, once done, the report it ended with (in its stored form,
//	    Report.AppendStoredJSON). A lease is not stored (Lease): a leased task's record
//	    says pending until the lease ends.
//	local_queue:pending:{domain}:{seq}
//	    Index of the pending tasks by domain, in submission order; the value is the task
//	    id. {domain} is escaped like the fetch_result index, {seq} is 16 hex digits. A
//	    leased task keeps its entry, so that a crash leaves it pending.
//	local_queue:leased:{task_id}
//	    Written by versions that stored their leases (records in state leased): returned
//	    to pending and deleted on open (requeueStale); no longer written.
//	local_queue:url:{sha256}
//	    Deduplication: the hex SHA-256 of a task's canonical URL → its task id.
//	local_queue:retry:{task_id}
//	    Index of the pending tasks waiting out a retry backoff (retry.go); the value
//	    is next_attempt_at in Unix nanoseconds (8 bytes big-endian) then the domain. Such a
//	    task is pending but not in the pending index until its time comes.
const (
	queueSeqKey     = embedded.LocalQueuePrefix + "meta:seq"
	queueCountsKey  = embedded.LocalQueuePrefix + "meta:counts"
	queueTaskPrefix = embedded.LocalQueuePrefix + "task:"
	queuePendPrefix = embedded.LocalQueuePrefix + "pending:"
	queueLeasPrefix = embedded.LocalQueuePrefix + "leased:"
	queueURLPrefix  = embedded.LocalQueuePrefix + "url:"
	queueRetrPrefix = embedded.LocalQueuePrefix + "retry:"
)

// queueRecord is the stored form of one task.
type queueRecord struct {
	downloader.Task
	Seq         uint64    `json:"seq"`
	State       string    `json:"state"`
	SubmittedAt time.Time `json:"submitted_at"`
	// LeaseCount counts the leases that ended (a task's end, a release, an expiry) and,
	// in memory, the one held now; a lease lost in a crash is not counted.
	LeaseCount int                `json:"lease_count"`
	Report     *downloader.Report `json:"report,omitempty"` // the last one
	// AttemptCount counts the attempts that reached the origin; OwnFailureCount the
	// failures of our own retried in place (not attempts, seed 002).
	AttemptCount    int `json:"attempt_count"`
	OwnFailureCount int `json:"own_failure_count"`
	// NextAttemptAt is set while the pending task waits out a retry backoff.
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	// Depth is how many links away from a seed a discovered task was found (0: a seed,
	// or any task of a list crawl; records written before it read as 0).
	Depth int `json:"depth,omitempty"`
}

// record reads a task record through b (an indexed batch sees its own writes; nil or a
// plain batch reads the database).
func (q *Queue) record(b *pebble.Batch, id string) (*queueRecord, bool, error) {
	var (
		v   []byte
		ok  bool
		err error
	)
	if b != nil && b.Indexed() {
		v, ok, err = batchGet(b, []byte(queueTaskPrefix+id))
	} else {
		v, ok, err = q.ks.Get([]byte(queueTaskPrefix + id))
	}
	if err != nil || !ok {
		return nil, ok, err
	}
	var rec queueRecord
	if err := decodeQueueRecord(v, &rec); err != nil {
		return nil, false, fmt.Errorf("local queue: decode task %s: %w", id, err)
	}
	return &rec, true, nil
}

// putRecord adds rec to b, and forgets the fresh copy of the task's record, which the
// batch makes stale. Requires q.mu held.
func (q *Queue) putRecord(b *pebble.Batch, rec *queueRecord) error {
	delete(q.fresh, rec.TaskID)
	buf, _ := q.recordBufs.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	defer q.recordBufs.Put(buf)
	v, err := encodeQueueRecord((*buf)[:0], rec)
	if err != nil {
		return fmt.Errorf("local queue: encode task %s: %w", rec.TaskID, err)
	}
	*buf = v
	if err := b.Set([]byte(queueTaskPrefix+rec.TaskID), v, nil); err != nil {
		return fmt.Errorf("local queue: put task %s: %w", rec.TaskID, err)
	}
	return nil
}

// putCounts adds to b the stored counts of next (those no index gives back: see the
// package comment), for a batch that changes them.
func (q *Queue) putCounts(b *pebble.Batch, next *Counts) error {
	buf, _ := q.recordBufs.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	defer q.recordBufs.Put(buf)
	*buf = appendStoredCounts((*buf)[:0], next)
	if err := b.Set([]byte(queueCountsKey), *buf, nil); err != nil {
		return fmt.Errorf("local queue: put counts: %w", err)
	}
	return nil
}

// commit commits b and, on success, makes next the counts in memory. Requires q.mu held.
func (q *Queue) commit(b *pebble.Batch, next Counts, opts *pebble.WriteOptions) error {
	if err := b.Commit(opts); err != nil {
		return fmt.Errorf("local queue: commit: %w", err)
	}
	q.counts = next
	return nil
}

// batchGet reads key through an indexed batch; with a nil or plain batch it returns
// nothing (the caller reads the database).
func batchGet(b *pebble.Batch, key []byte) ([]byte, bool, error) {
	if b == nil || !b.Indexed() {
		return nil, false, nil
	}
	v, closer, err := b.Get(key)
	if err == pebble.ErrNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("local queue: get %q: %w", key, err)
	}
	out := append([]byte(nil), v...)
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("local queue: get %q: %w", key, err)
	}
	return out, true, nil
}

func pendingKey(domain string, seq uint64) []byte {
	return fmt.Appendf(nil, "%s%s:%016x", queuePendPrefix, keys.EscapeDomain(domain), seq)
}

func queueURLKey(canonical string) []byte {
	sum := sha256.Sum256([]byte(canonical))
	return []byte(queueURLPrefix + hex.EncodeToString(sum[:]))
}

// defaultTaskID is the id the queue gives a task submitted without one: its seq, in 16
// lower-case hex digits (task ids then sort in submission order).
func defaultTaskID(seq uint64) string {
	var buf [16]byte
	return string(appendTaskID(buf[:0], seq))
}

func appendTaskID(b []byte, seq uint64) []byte {
	const digits = "0123456789abcdef"
	for i := 60; i >= 0; i -= 4 {
		b = append(b, digits[(seq>>uint(i))&0xf])
	}
	return b
}

func retryKey(taskID string) []byte { return []byte(queueRetrPrefix + taskID) }

func retryValue(at time.Time, domain string) []byte {
	v := make([]byte, 8, 8+len(domain))
	binary.BigEndian.PutUint64(v, uint64(at.UnixNano()))
	return append(v, domain...)
}

// Package outbox is entry A's report outbox: every report the source (the scheduler or
// the local queue) has not acknowledged yet, kept durably so that none is lost when the
// source is down or the process stops. It persists in the embedded store's Pebble
// database, in the keyspace the store hands it (embedded.ReportOutboxPrefix), so that a
// task's page, fetch_result and report are committed as one batch (CommitTask).
package outbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/store/embedded"
	"downloader/store/keys"
)

// Keys:
//
//	lease:report_outbox:{task_id}
//	    One Report: a header with its fetched_at, then JSON (encodeReport). {task_id} is the task's id as given (any bytes: the outbox is
//	    one prefix scan and needs no separator after the id).
//
// Keyed by task id, a task reported twice (a redelivered lease that ran again) holds one
// entry, the latest: the scheduler needs one report per task, and the latest is the truth.
// DeleteReport removes an entry only if it is still the report that was sent, so a newer
// report of the same task put meanwhile survives and is sent too.
const outboxPrefix = embedded.ReportOutboxPrefix

// Bounds of one PendingReports call.
const (
	defaultList   = keys.DefaultLimit
	maxOutboxList = 1000
)

func outboxKey(taskID string) []byte { return []byte(outboxPrefix + taskID) }

// Outbox is the report outbox of one embedded Store. Create one per Store with New (two
// would not serialise their deletes with each other's puts). Safe for concurrent use.
type Outbox struct {
	ks   *embedded.Keyspace
	st   *embedded.Store
	seed maphash.Seed
	// locks serialise the check-then-delete of a task's entry with its puts. No lock is
	// held across an fsync (PutReport).
	locks [64]sync.Mutex

	// floor is a key below which the outbox holds no report: a listing starts there
	// instead of at the prefix, so that it does not step over the tombstones of every
	// report deleted since the last compaction (the sender lists from the start after
	// each burst of puts, and deletes what it sent). A put below it lowers it; a listing
	// raises it to the first key it found, unless a put may have landed meanwhile
	// (floorGen moved). Memory only: a new Outbox starts at the prefix.
	floorMu  sync.Mutex
	floor    []byte
	floorGen uint64
}

// New returns the outbox kept in s.
func New(s *embedded.Store) *Outbox {
	return &Outbox{ks: s.OutboxKeyspace(), st: s, seed: maphash.MakeSeed(), floor: []byte(outboxPrefix)}
}

func (o *Outbox) lock(taskID string) func() {
	mu := &o.locks[maphash.String(o.seed, taskID)%uint64(len(o.locks))]
	mu.Lock()
	return mu.Unlock
}

// PutReport stores r in the outbox, replacing an earlier report of the same task. It
// returns once r is durable (a synchronous commit): only then may the task be
// acknowledged anywhere.
func (o *Outbox) PutReport(ctx context.Context, r *downloader.Report) error {
	return o.CommitTask(ctx, &downloader.TaskEnd{Report: r})
}

// CommitTask commits a task's end in one synchronous batch: its page and fetch_result in
// the Store's tables (embedded.Keyspace.StageTaskEnd, which fills the report's page key)
// and its report in the outbox, replacing an earlier report of the same task. It returns
// once all are durable; concurrent commits share one fsync. It satisfies
// downloader.TaskCommitter.
func (o *Outbox) CommitTask(ctx context.Context, end *downloader.TaskEnd) error {
	r := end.Report
	if r == nil || r.TaskID == "" {
		return downloader.Invalidf("task_id", "a report needs a task_id")
	}
	release, err := o.ks.Acquire(ctx, "put report")
	if err != nil {
		return err
	}
	defer release()
	b := o.ks.NewBatch()
	defer b.Close()
	done, err := o.ks.StageTaskEnd(ctx, b, end)
	if err != nil {
		return fmt.Errorf("outbox: put report %s: %w", r.TaskID, err)
	}
	v, err := encodeReport(r) // after staging: it filled the page key
	if err == nil {
		err = b.Set(outboxKey(r.TaskID), v, nil)
	}
	if err != nil {
		done(err)
		return fmt.Errorf("outbox: put report %s: %w", r.TaskID, err)
	}
	// The write is ordered with DeleteReport's check under the task's lock (the batch is
	// visible when ApplyNoSyncWait returns); its durability is waited for after the lock
	// is given back, so that a report waiting for the fsync holds no other task's put
	// (they share one fsync instead).
	unlock := o.lock(r.TaskID)
	err = o.ks.ApplyNoSyncWait(b, pebble.Sync)
	unlock()
	o.lowerFloor(outboxKey(r.TaskID))
	if err == nil {
		err = b.SyncWait()
	}
	done(err)
	if err != nil {
		return fmt.Errorf("outbox: put report %s: %w", r.TaskID, err)
	}
	return nil
}

// PendingReports returns up to limit reports of the outbox (1..1000; 0 means 100) whose
// task id sorts after after ("" for the first), in task id order. Paging with the last
// task id returned walks the whole outbox once even while reports are added and deleted.
func (o *Outbox) PendingReports(ctx context.Context, after string, limit int) ([]downloader.Report, error) {
	switch {
	case limit == 0:
		limit = defaultList
	case limit < 1 || limit > maxOutboxList:
		return nil, downloader.Invalidf("limit", "limit must be between 1 and %d", maxOutboxList)
	}
	release, err := o.ks.Acquire(ctx, "list reports")
	if err != nil {
		return nil, err
	}
	defer release()
	lower := []byte(outboxPrefix)
	if after != "" {
		lower = append(outboxKey(after), 0)
	}
	// Read the floor before the iterator exists: a put visible to the iterator is
	// listed, one made visible after it moves floorGen (PutReport lowers the floor once
	// its write is visible) and keeps this listing from raising the floor past it.
	o.floorMu.Lock()
	gen, fromFloor := o.floorGen, bytes.Compare(lower, o.floor) <= 0
	if fromFloor {
		lower = append([]byte(nil), o.floor...)
	}
	o.floorMu.Unlock()
	upper := keys.PrefixEnd(outboxPrefix)
	iter, err := o.ks.NewIter(ctx, lower, upper)
	if err != nil {
		return nil, fmt.Errorf("outbox: list reports: %w", err)
	}
	var out []downloader.Report
	for ok := iter.First(); ok && len(out) < limit; ok = iter.Next() {
		if len(out) == 0 && fromFloor {
			o.raiseFloor(gen, iter.Key())
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			_ = iter.Close()
			return nil, fmt.Errorf("outbox: list reports: %w", err)
		}
		var r downloader.Report
		if err := decodeReport(v, &r); err != nil {
			_ = iter.Close()
			return nil, fmt.Errorf("outbox: decode report at %q: %w", iter.Key(), err)
		}
		out = append(out, r)
	}
	if len(out) == 0 && fromFloor && iter.Error() == nil {
		o.raiseFloor(gen, upper)
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("outbox: list reports: %w", err)
	}
	return out, nil
}

// lowerFloor makes the listing floor at most key, after a put of key became visible.
func (o *Outbox) lowerFloor(key []byte) {
	o.floorMu.Lock()
	defer o.floorMu.Unlock()
	o.floorGen++
	if bytes.Compare(key, o.floor) < 0 {
		o.floor = key
	}
}

// raiseFloor moves the floor up to key, the first key a listing that started at or
// below the floor found (none before it), unless a put came since the listing read
// floorGen at gen.
func (o *Outbox) raiseFloor(gen uint64, key []byte) {
	o.floorMu.Lock()
	defer o.floorMu.Unlock()
	if o.floorGen == gen && bytes.Compare(key, o.floor) > 0 {
		o.floor = append(o.floor[:0:0], key...)
	}
}

// DeleteReport removes r's task from the outbox if the stored report is still r (same
// fetched_at): a report acknowledged by the scheduler is gone, a newer one of the same task
// stays. It reports whether it deleted. The delete need not be durable: if a crash loses
// it, the report is sent again (at least once), and the write-ahead log keeps it after
// whatever the acknowledgement wrote.
func (o *Outbox) DeleteReport(ctx context.Context, r *downloader.Report) (bool, error) {
	if r == nil || r.TaskID == "" {
		return false, downloader.Invalidf("task_id", "a report needs a task_id")
	}
	release, err := o.ks.Acquire(ctx, "delete report")
	if err != nil {
		return false, err
	}
	defer release()
	unlock := o.lock(r.TaskID)
	defer unlock()
	key := outboxKey(r.TaskID)
	v, ok, err := o.ks.Get(key)
	if err != nil || !ok {
		return false, err
	}
	at, err := reportFetchedAt(v)
	if err != nil {
		return false, fmt.Errorf("outbox: decode report %s: %w", r.TaskID, err)
	}
	if !at.Equal(r.FetchedAt) {
		return false, nil
	}
	if err := o.ks.Delete(key, pebble.NoSync); err != nil {
		return false, fmt.Errorf("outbox: delete report %s: %w", r.TaskID, err)
	}
	return true, nil
}

// DeleteReports is DeleteReport for each of rs, in one write: the sender deletes a page of
// acknowledged reports at once. It holds the locks of rs's tasks (in lock order, so that
// two callers cannot deadlock) across the checks and the write, never across an fsync (the
// delete need not be durable, see DeleteReport).
func (o *Outbox) DeleteReports(ctx context.Context, rs []downloader.Report) error {
	if len(rs) == 0 {
		return nil
	}
	release, err := o.ks.Acquire(ctx, "delete reports")
	if err != nil {
		return err
	}
	defer release()
	var held [len(o.locks)]bool
	for i := range rs {
		if rs[i].TaskID == "" {
			return downloader.Invalidf("task_id", "a report needs a task_id")
		}
		held[maphash.String(o.seed, rs[i].TaskID)%uint64(len(o.locks))] = true
	}
	for i, h := range held {
		if h {
			o.locks[i].Lock()
			defer o.locks[i].Unlock()
		}
	}
	b := o.ks.NewBatch()
	defer b.Close()
	for i := range rs {
		key := outboxKey(rs[i].TaskID)
		v, ok, err := o.ks.Get(key)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		at, err := reportFetchedAt(v)
		if err != nil {
			return fmt.Errorf("outbox: decode report %s: %w", rs[i].TaskID, err)
		}
		if !at.Equal(rs[i].FetchedAt) {
			continue
		}
		if err := b.Delete(key, nil); err != nil {
			return fmt.Errorf("outbox: delete report %s: %w", rs[i].TaskID, err)
		}
	}
	if b.Empty() {
		return nil
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("outbox: delete reports: %w", err)
	}
	return nil
}

// A stored report is a header holding its fetched_at, then the report as JSON:
//
//	0x01, fetched_at as 8 bytes of Unix seconds and 4 of nanoseconds (big-endian), JSON
//
// so that DeleteReport compares fetched_at without decoding the JSON. A value written
// before the header existed is the JSON alone (it starts with '{') and is read as such.
const (
	reportHeader    = 0x01
	reportHeaderLen = 13
)

func encodeReport(r *downloader.Report) ([]byte, error) {
	v := make([]byte, reportHeaderLen, reportHeaderLen+256)
	v[0] = reportHeader
	binary.BigEndian.PutUint64(v[1:9], uint64(r.FetchedAt.Unix()))
	binary.BigEndian.PutUint32(v[9:13], uint32(r.FetchedAt.Nanosecond()))
	// The stored form: json.Marshal's bytes without the null and zero fields, which
	// decodeReport gives back as they were (the scheduler is sent the full form).
	return r.AppendStoredJSON(v)
}

func decodeReport(v []byte, r *downloader.Report) error {
	if len(v) > 0 && v[0] == reportHeader {
		if len(v) < reportHeaderLen {
			return errors.New("short report header")
		}
		v = v[reportHeaderLen:]
	}
	return json.Unmarshal(v, r)
}

// reportFetchedAt reads only fetched_at of a stored report: from its header, or by
// decoding a value written without one.
func reportFetchedAt(v []byte) (time.Time, error) {
	if len(v) > 0 && v[0] == reportHeader {
		if len(v) < reportHeaderLen {
			return time.Time{}, errors.New("short report header")
		}
		return time.Unix(int64(binary.BigEndian.Uint64(v[1:9])), int64(binary.BigEndian.Uint32(v[9:13]))), nil
	}
	var stored struct {
		FetchedAt time.Time `json:"fetched_at"`
	}
	err := json.Unmarshal(v, &stored)
	return stored.FetchedAt, err
}

// ReportCount returns how many reports wait in the outbox. It walks the keys.
func (o *Outbox) ReportCount(ctx context.Context) (int, error) {
	release, err := o.ks.Acquire(ctx, "count reports")
	if err != nil {
		return 0, err
	}
	defer release()
	iter, err := o.ks.NewIter(ctx, []byte(outboxPrefix), keys.PrefixEnd(outboxPrefix))
	if err != nil {
		return 0, fmt.Errorf("outbox: count reports: %w", err)
	}
	n := 0
	for ok := iter.First(); ok; ok = iter.Next() {
		n++
	}
	if err := iter.Close(); err != nil {
		return 0, fmt.Errorf("outbox: count reports: %w", err)
	}
	return n, nil
}

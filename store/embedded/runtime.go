package embedded

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/store/keys"
)

// downloader:domain_runtime on one machine (SPEC §2, loss and rebuild). The limiter lives
// in memory; the store keeps only what a restart needs to wait no longer than safety
// requires, under the table's own prefix, in the layout of the TiKV store (a domain is
// never empty, so the "::" keys never meet a domain's):
//
//	downloader:domain_runtime::heartbeat
//	    The running process's last sign of life, JSON {"last_heartbeat_at"}, written with a
//	    synchronous commit about once a second. After a crash the next start counts the
//	    table as lost at it (plus a margin), not at its own start.
//	downloader:domain_runtime::clean_stop
//	    Written last, synchronously, by a clean stop: JSON {"saved_at", "loss_at",
//	    "entry_count"}. Without it the entries below are not trusted (a stop that died
//	    while saving) and the heartbeat decides.
//	downloader:domain_runtime:{domain}
//	    One saved limiter entry (entries that can still refuse a request), binary:
//	    version byte (2), last_request_at and wire_at as Unix ns (int64, big-endian;
//	    wire_at 0 when unknown), min_interval_ms (uint32), in_flight_count (uint32),
//	    hold_until_at as Unix ns (int64; 0 when the origin asked for no wait), then the
//	    interval_source string. Version 1, without hold_until_at, is still read. {domain}
//	    is escaped as in the fetch_result index.
//
// The next start reads them and, in one synchronous commit, deletes the snapshot and
// writes its first heartbeat, so that a crash at any later moment is seen as one.
const (
	domainRuntimePrefix = "downloader:domain_runtime:"
	heartbeatKey        = domainRuntimePrefix + ":heartbeat"
	cleanStopKey        = domainRuntimePrefix + ":clean_stop"
	runtimeEntryVersion = 2
	// runtimeEntryVersion1 is the layout before hold_until_at, still read.
	runtimeEntryVersion1 = 1
	runtimeBatchSize     = 10_000
)

// RuntimeStartKind says what the previous process left of downloader:domain_runtime.
type RuntimeStartKind string

const (
	// RuntimeFresh: the database was empty, nothing ever served from it.
	RuntimeFresh RuntimeStartKind = "fresh"
	// RuntimeCleanStop: the previous process saved its entries at a clean stop.
	RuntimeCleanStop RuntimeStartKind = "clean_stop"
	// RuntimeCrashed: the previous process stopped without saving (kill -9, a crash, a
	// failed save); its last heartbeat is its last sign of life.
	RuntimeCrashed RuntimeStartKind = "crashed"
	// RuntimeUnknown: the data dir has data but no heartbeat (written by a build without
	// one): when the previous process last sent anything is not known.
	RuntimeUnknown RuntimeStartKind = "unknown"
)

// RuntimeStart is what StartRuntime found.
type RuntimeStart struct {
	Kind RuntimeStartKind
	// LastHeartbeatAt is the previous process's last heartbeat (RuntimeCrashed).
	LastHeartbeatAt time.Time
	// Snapshot is what the clean stop saved (RuntimeCleanStop).
	Snapshot downloader.RuntimeSnapshot
}

type heartbeatRecord struct {
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
}

type cleanStopRecord struct {
	SavedAt    time.Time `json:"saved_at"`
	LossAt     time.Time `json:"loss_at,omitzero"`
	EntryCount int       `json:"entry_count"`
}

// StartRuntime reads what the previous process left of downloader:domain_runtime and, in
// one synchronous commit, removes the saved entries and writes a heartbeat at now. Call
// it once at start-up, before the first request and before anything else is written.
func (s *Store) StartRuntime(ctx context.Context, now time.Time) (RuntimeStart, error) {
	release, err := s.acquire(ctx, "start runtime")
	if err != nil {
		return RuntimeStart{}, err
	}
	defer release()
	start, err := s.readRuntime()
	if err != nil {
		return RuntimeStart{}, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	// The heartbeat is set after the range deletion: in one batch the later write wins.
	if err := b.DeleteRange([]byte(domainRuntimePrefix), keys.PrefixEnd(domainRuntimePrefix), nil); err != nil {
		return RuntimeStart{}, fmt.Errorf("embedded store: clear domain_runtime: %w", err)
	}
	if err := setHeartbeat(b, now); err != nil {
		return RuntimeStart{}, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return RuntimeStart{}, fmt.Errorf("embedded store: start domain_runtime: %w", err)
	}
	return start, nil
}

func (s *Store) readRuntime() (RuntimeStart, error) {
	var stop cleanStopRecord
	hasStop, err := s.getJSON(cleanStopKey, &stop)
	if err != nil {
		return RuntimeStart{}, err
	}
	var hb heartbeatRecord
	hasHeartbeat, err := s.getJSON(heartbeatKey, &hb)
	if err != nil {
		return RuntimeStart{}, err
	}
	if hasStop {
		snap, err := s.readSnapshot(stop)
		if err == nil {
			return RuntimeStart{Kind: RuntimeCleanStop, Snapshot: snap}, nil
		}
		// A snapshot that cannot be read is not trusted: nothing was sent after it was
		// taken, so count the table as lost at its moment.
		s.logger.Error("store: the saved domain_runtime cannot be read; counting it as lost at its save", "error", err)
		return RuntimeStart{Kind: RuntimeCrashed, LastHeartbeatAt: stop.SavedAt}, nil
	}
	if hasHeartbeat {
		return RuntimeStart{Kind: RuntimeCrashed, LastHeartbeatAt: hb.LastHeartbeatAt}, nil
	}
	empty, err := s.isEmpty()
	if err != nil {
		return RuntimeStart{}, err
	}
	if empty {
		return RuntimeStart{Kind: RuntimeFresh}, nil
	}
	return RuntimeStart{Kind: RuntimeUnknown}, nil
}

func (s *Store) readSnapshot(stop cleanStopRecord) (downloader.RuntimeSnapshot, error) {
	snap := downloader.RuntimeSnapshot{SavedAt: stop.SavedAt, LossAt: stop.LossAt, Entries: make([]downloader.SavedDomain, 0, stop.EntryCount)}
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(domainRuntimePrefix), UpperBound: keys.PrefixEnd(domainRuntimePrefix)})
	if err != nil {
		return snap, fmt.Errorf("embedded store: read domain_runtime: %w", err)
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		k := iter.Key()[len(domainRuntimePrefix):]
		if len(k) > 0 && k[0] == ':' {
			continue // the "::" records
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			return snap, errors.Join(fmt.Errorf("embedded store: read domain_runtime: %w", err), iter.Close())
		}
		e, err := decodeRuntimeEntry(keys.UnescapeDomain(string(k)), v)
		if err != nil {
			return snap, errors.Join(err, iter.Close())
		}
		snap.Entries = append(snap.Entries, e)
	}
	if err := errors.Join(iter.Error(), iter.Close()); err != nil {
		return snap, fmt.Errorf("embedded store: read domain_runtime: %w", err)
	}
	if len(snap.Entries) != stop.EntryCount {
		return snap, fmt.Errorf("embedded store: domain_runtime holds %d entries, the clean stop saved %d", len(snap.Entries), stop.EntryCount)
	}
	return snap, nil
}

// Heartbeat records the running process's sign of life at now, durably (one small
// synchronous commit).
func (s *Store) Heartbeat(ctx context.Context, now time.Time) error {
	release, err := s.acquire(ctx, "heartbeat")
	if err != nil {
		return err
	}
	defer release()
	b := s.db.NewBatch()
	defer b.Close()
	if err := setHeartbeat(b, now); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("embedded store: heartbeat: %w", err)
	}
	return nil
}

func setHeartbeat(b *pebble.Batch, now time.Time) error {
	v, err := json.Marshal(heartbeatRecord{LastHeartbeatAt: now.Round(0).UTC()})
	if err != nil {
		return fmt.Errorf("embedded store: encode heartbeat: %w", err)
	}
	if err := b.Set([]byte(heartbeatKey), v, nil); err != nil {
		return fmt.Errorf("embedded store: heartbeat: %w", err)
	}
	return nil
}

// SaveRuntime keeps snap for the next start: the entries in batches, then the clean-stop
// record in a synchronous commit, which makes the batches before it durable too (one
// write-ahead log). Call it at a clean stop, after the last request and the last
// Heartbeat.
func (s *Store) SaveRuntime(ctx context.Context, snap downloader.RuntimeSnapshot) error {
	release, err := s.acquire(ctx, "save runtime")
	if err != nil {
		return err
	}
	defer release()
	b := s.db.NewBatch()
	defer func() { b.Close() }()
	// Nothing is expected under the prefix but the heartbeat; clear it all the same, so
	// that the count in the clean-stop record is the count of entries.
	if err := b.DeleteRange([]byte(domainRuntimePrefix), keys.PrefixEnd(domainRuntimePrefix), nil); err != nil {
		return fmt.Errorf("embedded store: save domain_runtime: %w", err)
	}
	for i, e := range snap.Entries {
		if err := b.Set([]byte(domainRuntimePrefix+keys.EscapeDomain(e.Domain)), encodeRuntimeEntry(e), nil); err != nil {
			return fmt.Errorf("embedded store: save domain_runtime %q: %w", e.Domain, err)
		}
		if (i+1)%runtimeBatchSize == 0 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return fmt.Errorf("embedded store: save domain_runtime: %w", err)
			}
			b.Close()
			b = s.db.NewBatch()
		}
	}
	v, err := json.Marshal(cleanStopRecord{SavedAt: snap.SavedAt.Round(0).UTC(), LossAt: snap.LossAt, EntryCount: len(snap.Entries)})
	if err != nil {
		return fmt.Errorf("embedded store: encode clean stop: %w", err)
	}
	if err := b.Set([]byte(cleanStopKey), v, nil); err != nil {
		return fmt.Errorf("embedded store: save domain_runtime: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("embedded store: save domain_runtime: %w", err)
	}
	return nil
}

const (
	runtimeEntryFixed1 = 1 + 8 + 8 + 4 + 4
	runtimeEntryFixed  = runtimeEntryFixed1 + 8
)

func encodeRuntimeEntry(e downloader.SavedDomain) []byte {
	v := make([]byte, runtimeEntryFixed, runtimeEntryFixed+len(e.IntervalSource))
	v[0] = runtimeEntryVersion
	binary.BigEndian.PutUint64(v[1:], uint64(e.LastRequestAt.UnixNano()))
	var wire int64
	if !e.WireAt.IsZero() {
		wire = e.WireAt.UnixNano()
	}
	binary.BigEndian.PutUint64(v[9:], uint64(wire))
	binary.BigEndian.PutUint32(v[17:], uint32(min(max(e.MinIntervalMs, 0), math.MaxUint32)))
	binary.BigEndian.PutUint32(v[21:], uint32(min(max(e.InFlightCount, 0), math.MaxUint32)))
	var hold int64
	if !e.HoldUntil.IsZero() {
		hold = e.HoldUntil.UnixNano()
	}
	binary.BigEndian.PutUint64(v[25:], uint64(hold))
	return append(v, e.IntervalSource...)
}

func decodeRuntimeEntry(domain string, v []byte) (downloader.SavedDomain, error) {
	fixed := runtimeEntryFixed
	if len(v) > 0 && v[0] == runtimeEntryVersion1 {
		fixed = runtimeEntryFixed1
	} else if len(v) > 0 && v[0] != runtimeEntryVersion {
		fixed = -1
	}
	if fixed < 0 || len(v) < fixed {
		return downloader.SavedDomain{}, fmt.Errorf("embedded store: domain_runtime %q: not a saved entry", domain)
	}
	e := downloader.SavedDomain{
		Domain:         domain,
		LastRequestAt:  time.Unix(0, int64(binary.BigEndian.Uint64(v[1:]))).UTC(),
		MinIntervalMs:  int64(binary.BigEndian.Uint32(v[17:])),
		InFlightCount:  int(binary.BigEndian.Uint32(v[21:])),
		IntervalSource: downloader.IntervalSource(v[fixed:]),
	}
	if fixed == runtimeEntryFixed {
		if hold := int64(binary.BigEndian.Uint64(v[25:])); hold != 0 {
			e.HoldUntil = time.Unix(0, hold).UTC()
		}
	}
	if wire := int64(binary.BigEndian.Uint64(v[9:])); wire != 0 {
		e.WireAt = time.Unix(0, wire).UTC()
	}
	return e, nil
}

// getJSON decodes the value at key into v; ok is false when there is none.
func (s *Store) getJSON(key string, v any) (ok bool, err error) {
	b, ok, err := s.get([]byte(key))
	if err != nil || !ok {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("embedded store: decode %s: %w", key, err)
	}
	return true, nil
}

// isEmpty reports whether the database holds no key at all.
func (s *Store) isEmpty() (bool, error) {
	iter, err := s.db.NewIter(nil)
	if err != nil {
		return false, fmt.Errorf("embedded store: scan: %w", err)
	}
	has := iter.First()
	if err := errors.Join(iter.Error(), iter.Close()); err != nil {
		return false, fmt.Errorf("embedded store: scan: %w", err)
	}
	return !has, nil
}

// Package embedded is the single-machine store: downloader:fetch_result, the settings and
// the page store (网页库) in one Pebble database in the data directory. It needs no server.
//
// Pebble (an LSM tree) fits the load: writes dominate (one result per task, one page per
// stored fetch), they are appends under fresh keys, and reads are short range scans from a
// seek (a results page) or point reads (a page by key).
//
// # Key layout
//
// Keys follow SPEC §7, {service}:{table}:{key}, and SPEC §5: the downloader: namespace
// holds only its two tables (store/keys). Every prefix in the database:
//
//	downloader:fetch_result:id:{id}
//	    One FetchResult, JSON. {id} is 32 lower-case hex digits: 16 of the bitwise
//	    complement of fetched_at in Unix nanoseconds, then 16 of the complement of a
//	    per-process insertion sequence. Ascending key order is therefore newest first
//	    (ties on fetched_at: the later insertion first), and {id} is also the cursor.
//	downloader:fetch_result:domain:{domain}:{id}
//	    The same table's index by domain; empty value, same {id}. It is written in the
//	    same atomic batch as the record. {domain} is the record's domain with '%' and ':'
//	    percent-encoded (IPv6 literals contain ':'), so a domain's entries are one
//	    contiguous key range. Records with an empty domain are not indexed.
//	config:downloader:global
//	    The service-wide Settings, JSON. Written with a synchronous commit.
//	page:content:{sha256}
//	    One page of the page store: {sha256} is the lower-case hex SHA-256 of the body, which
//	    is also the page key callers see. The value is a format byte, the metadata as JSON
//	    (length-prefixed) and the body compressed with zstd.
//	local_queue:*
//	    The standalone crawl's task queue (package localqueue, through QueueKeyspace): it
//	    stands in for the scheduler, another service, hence its own service name.
//	lease:report_outbox:{task_id}
//	    Reports of entry A's lease loop not yet acknowledged (package outbox, through
//	    OutboxKeyspace).
//
// Those two packages keep their tables here, not in a database of their own, so that one
// batch commits a task's page, fetch_result and report (taskwrites.go); their logic is
// theirs, and each sees only its keyspace (keyspace.go).
//
// Data directories written before these names are moved to them once at Open
// (migrate.go).
//
//	downloader:domain_runtime::heartbeat, ::clean_stop, downloader:domain_runtime:{domain}
//	    What a restart needs of the limiter's table (runtime.go): the running process's
//	    heartbeat, and the entries a clean stop saved.
//
// downloader:domain_runtime itself lives in memory on one machine (package limiter): a
// copy per request would cost a write per request, and the table may be lost by design
// (SPEC §2: a lost entry is rebuilt conservatively). What is stored is only what makes a
// restart wait no longer than safety needs: a heartbeat a second, and at a clean stop the
// entries that can still refuse a request. The TiKV store, shared by several machines, is
// where the table itself becomes a stored table.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"downloader"
	"downloader/store/pagevalue"
)

// Interface checks.
var (
	_ downloader.SettingsStore = (*Store)(nil)
	_ downloader.ResultStore   = (*Store)(nil)
	_ downloader.PageStore     = (*Store)(nil)
)

// cacheSize is Pebble's block cache. Pebble's default (8 MiB) is small for an index walk
// over 10^6 records; 64 MiB keeps the hot part of the index and recent records in memory.
const cacheSize = 64 << 20

// diskSlowThreshold is how long a disk operation may take before it is logged as slow
// (Pebble's default).
const diskSlowThreshold = 5 * time.Second

// walMinSyncInterval is the least time between the end of one fsync of the write-ahead
// log and the start of the next (Pebble's WALMinSyncInterval). Commits that arrive
// meanwhile wait, and then share one fsync: a busy lease loop's task ends (each a
// synchronous commit) took 1,136 fdatasync per 10,000 tasks without it, 632 with 3 ms
// (`strace -c` of `leasebench -only cpu-a`). A commit after a quiet moment is not delayed:
// the wait starts only after a sync. See docs/decisions.md, "WAL syncs at most every 3 ms".
const walMinSyncInterval = 3 * time.Millisecond

// Store is the embedded store. All methods are safe for concurrent use. Create it with
// Open and release it with Close; methods called after Close return an EUNAVAILABLE error.
type Store struct {
	logger *slog.Logger
	db     *pebble.DB
	opts   options
	// fsCloser stops the disk-health checker of db's file system, after db is closed.
	fsCloser io.Closer

	codec *pagevalue.Codec
	// resultBufs holds *[]byte buffers for encoding fetch_results (resultBuf).
	resultBufs sync.Pool

	// seq orders records with the same fetched_at; it starts at the wall-clock time of Open
	// so that it keeps growing across restarts (see nextID).
	seq atomic.Uint64

	// pageMu guards pageWrites, the pages being written now: a body stored twice at once
	// is written once, the second caller waiting for the first's commit. The lock is held
	// only to look at the map, never across a commit, so that concurrent writers share
	// fsyncs (Pebble's commit pipeline syncs the write-ahead log once for all of them).
	pageMu     sync.Mutex
	pageWrites map[string]*pageWrite
	// pageFilter (pagefilter.go), under pageMu: the page keys stored or being written, so
	// that a new body skips its lookup. Built by the first PutPage; pageFilterOff once it
	// cannot be (too many pages, or the scan failed); pageFilterBuildCount counts builds.
	pageFilter           *pageFilter
	pageFilterOff        bool
	pageFilterBuildCount int
	// pageWriteCount counts pages actually written (tests check deduplication with it).
	pageWriteCount atomic.Int64
	// pageLookupSkipCount counts the PutPage calls whose lookup the page filter skipped.
	pageLookupSkipCount atomic.Int64
	// urls (urlfilter.go): the URLs with an entry in the page store's URL index, so that
	// LatestPage skips the read for a URL never indexed; urlLookupSkipCount counts those.
	urls               *urlFilter
	urlLookupSkipCount atomic.Int64

	// mu guards closed: every operation holds it for reading so Close cannot close the
	// database under it (Pebble panics on use after close).
	mu     sync.RWMutex
	closed bool
}

// options are the knobs tests and benchmarks turn; Open uses defaultOptions.
type options struct {
	// resultWrite and pageWrite are the write options of fetch results and pages.
	// Settings are always written with pebble.Sync.
	resultWrite *pebble.WriteOptions
	pageWrite   *pebble.WriteOptions
}

// defaultOptions make every acknowledged write durable: a fetch result is reported to the
// scheduler after it is stored, and a page key is handed out after the page is stored, so
// losing either in a crash would leave the scheduler or a record pointing at nothing.
//
// The cost, measured with bench_test.go on the 2-core reference VM: one writer alone
// commits ~1,050 results/s synchronously against ~39,000/s without sync, but Pebble
// commits concurrent writers as a group behind one fsync, and 32 writers (a busy lease
// loop) reach ~9,900 results/s synchronously (~51,000/s without). Pages of 60 KB: ~1,540/s
// synchronously with 32 writers, ~3,700/s without. A polite crawler on one machine makes
// far fewer fetches than that, so durability is kept.
func defaultOptions() options {
	return options{resultWrite: pebble.Sync, pageWrite: pebble.Sync}
}

// Open opens (creating it if needed) the store in directory dir, for example
// <data-dir>/store. Only one process may have a directory open at a time. A nil logger
// discards Pebble's messages.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	return open(dir, logger, defaultOptions())
}

func open(dir string, logger *slog.Logger, o options) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "store", "store_dir", dir)
	codec, err := pagevalue.NewCodec()
	if err != nil {
		return nil, fmt.Errorf("embedded store: %w", err)
	}
	// The disk-health-checking file system is what Pebble uses by default; it is set up
	// here because Pebble leaks its goroutine when Open fails, and so that a slow disk is
	// logged.
	fs, fsCloser := vfs.WithDiskHealthChecks(vfs.Default, diskSlowThreshold, nil, func(info vfs.DiskSlowInfo) {
		logger.Warn("store: slow disk operation", "path", info.Path, "op", info.OpType.String(),
			"write_bytes", info.WriteSize, "elapsed_ms", info.Duration.Milliseconds())
	})
	popts := &pebble.Options{
		FS:                 fs,
		CacheSize:          cacheSize,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{logger},
		// Every synchronous commit still waits for its fsync; a sync begins at most every
		// walMinSyncInterval after the last one ended, so that more commits share it.
		WALMinSyncInterval: func() time.Duration { return walMinSyncInterval },
	}
	// Bloom filters (every level inherits L0's) let a point read of an absent key skip the
	// tables: PutPage asks for every new body's hash before writing it.
	popts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	db, err := pebble.Open(dir, popts)
	if err != nil {
		_ = fsCloser.Close()
		codec.Close()
		return nil, fmt.Errorf("embedded store: open %s: %w", dir, err)
	}
	s := &Store{logger: logger, db: db, fsCloser: fsCloser, opts: o, codec: codec, pageWrites: map[string]*pageWrite{}}
	s.seq.Store(uint64(time.Now().UnixNano()))
	if err := s.migrate(); err != nil {
		_ = s.Close()
		return nil, err
	}
	if s.urls, err = buildURLFilter(db); err != nil {
		logger.Warn("URL index filter not built: every conditional request reads the index", "error", err)
	}
	return s, nil
}

// Close flushes nothing extra (every acknowledged write is already in the write-ahead log)
// and closes the database. It waits for operations in progress. Calling it again is a
// no-op.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.db.Close()
	_ = s.fsCloser.Close()
	s.codec.Close()
	if err != nil {
		return fmt.Errorf("embedded store: close: %w", err)
	}
	return nil
}

// acquire checks ctx and that the store is open, and holds the store open until release.
func (s *Store) acquire(ctx context.Context, op string) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("embedded store: %s: %w", op, err)
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, downloader.Errorf(downloader.EUNAVAILABLE, "the store is closed")
	}
	return s.mu.RUnlock, nil
}

// get returns a copy of the value at key; ok is false when there is none.
func (s *Store) get(key []byte) (value []byte, ok bool, err error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("embedded store: get %q: %w", key, err)
	}
	value = append([]byte(nil), v...)
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("embedded store: get %q: %w", key, err)
	}
	return value, true, nil
}

// has reports whether key exists, without copying its value.
func (s *Store) has(key []byte) (bool, error) {
	_, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("embedded store: get %q: %w", key, err)
	}
	if err := closer.Close(); err != nil {
		return false, fmt.Errorf("embedded store: get %q: %w", key, err)
	}
	return true, nil
}

// pebbleLogger sends Pebble's messages to slog. Pebble's informational messages (WAL
// recovery, compactions) are debug-level noise for a user of the downloader.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf is called on an invariant violation inside Pebble, after which it must not go on.
// Panicking (rather than os.Exit, Pebble's default) lets deferred cleanup and the process's
// crash handling run.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(msg)
}

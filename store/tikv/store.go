// Package tikv is the cluster store: several downloader machines share one TiKV cluster
// (the seeds' engine) for downloader:fetch_result, the page store (网页库), the settings and
// downloader:domain_runtime, the limiter state that keeps each domain's interval across
// all of them (Runtime, runtime.go and the files it names). It speaks to TiKV with
// client-go's transactional API only (never raw KV on the same keys, which TiKV does not
// isolate from transactions).
//
// # Key layout
//
// The store keys are those of package keys, so both backends order, page and escape alike:
//
//	config:downloader:global
//	    Settings, JSON. Cluster-wide: max_concurrent_count changed through any instance.
//	downloader:fetch_result:id:{id}
//	    One FetchResult, JSON. {id} as in package keys; its insertion sequence is the
//	    writing transaction's start timestamp from PD's TSO, unique across the cluster and
//	    increasing, so records of different machines never collide and a later insertion
//	    lists first.
//	downloader:fetch_result:domain:{domain}:{id}
//	    The table's index by domain, written in the same transaction as the record.
//	page:content:{sha256}
//	    One page: a format byte, the metadata as JSON (length-prefixed), then the body
//	    compressed with zstd (format 1, as the embedded store), or, when the compressed
//	    body exceeds chunkSize, nothing more (format 2: the metadata names the chunk count).
//	page:content:{sha256}:{n}
//	    Chunk n (4 hex digits) of a format-2 page's compressed body. TiKV keeps values
//	    small (a raft entry is at most 8 MiB by default); pages are up to 10 MiB.
//
// The limiter's keys are documented in table.go.
//
// Every method is safe for concurrent use and checks its context first. A method that cannot
// reach TiKV returns an error whose code is EUNAVAILABLE (HTTP 503 at the API).
package tikv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pingcap/log"
	tikverr "github.com/tikv/client-go/v2/error"
	"github.com/tikv/client-go/v2/oracle"
	tikvclient "github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/txnkv"
	"github.com/tikv/client-go/v2/txnkv/transaction"
	"go.uber.org/zap/zapcore"

	"downloader"
	"downloader/store/pagevalue"
)

// Interface checks.
var (
	_ downloader.SettingsStore = (*Store)(nil)
	_ downloader.ResultStore   = (*Store)(nil)
	_ downloader.PageStore     = (*Store)(nil)
)

// tsoMaxBackoffMs bounds the retries of one timestamp request (client-go's own bound for
// Begin); the caller's context bounds it further.
const tsoMaxBackoffMs = 15000

// Store is the TiKV store. Create it with Open (production) or New (an existing client,
// e.g. the mock cluster of package tikvtest); release it with Close. Methods called after
// Close return an EUNAVAILABLE error.
type Store struct {
	kv        *tikvclient.KVStore
	log       *slog.Logger
	opTimeout time.Duration

	codec *pagevalue.Codec

	// mu guards closed: operations hold it for reading so that Close waits for them.
	mu     sync.RWMutex
	closed bool

	conflicts atomic.Int64 // transactions retried after a write conflict (benchmarks report it)

	// twoPC turns one-phase and async commit off (plain two-phase commit): tests and
	// benchmarks compare the two; production never sets it.
	twoPC bool
}

// Options configure a Store. The zero value takes the defaults.
type Options struct {
	Logger *slog.Logger // default: discard
	// OpTimeout bounds every operation (default DefaultOpTimeout): client-go would
	// otherwise retry an unreachable cluster for tens of seconds whatever the caller's
	// deadline, and requests would pile up behind it.
	OpTimeout time.Duration
}

// DefaultOpTimeout is the default Options.OpTimeout. Writes of large pages get a second
// more per MiB.
const DefaultOpTimeout = 10 * time.Second

// Open connects to the TiKV cluster whose PD endpoints (host:port) are given. client-go
// logs through a process-wide zap logger: Open turns it down to warnings (the store logs
// what matters to slog itself).
func Open(pdEndpoints []string, o Options) (*Store, error) {
	if len(pdEndpoints) == 0 {
		return nil, errors.New("tikv store: no PD endpoint")
	}
	log.SetLevel(zapcore.WarnLevel)
	c, err := txnkv.NewClient(pdEndpoints)
	if err != nil {
		return nil, fmt.Errorf("tikv store: connect to PD %v: %w", pdEndpoints, err)
	}
	s, err := New(c.KVStore, o)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store over kv, which it then owns: Close closes it.
func New(kv *tikvclient.KVStore, o Options) (*Store, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	codec, err := pagevalue.NewCodec()
	if err != nil {
		return nil, fmt.Errorf("tikv store: %w", err)
	}
	return &Store{kv: kv, log: logger.With("component", "tikv_store"), opTimeout: o.OpTimeout, codec: codec}, nil
}

// Close waits for operations in progress and closes the client. Calling it again is a
// no-op.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.codec.Close()
	if err := s.kv.Close(); err != nil {
		return fmt.Errorf("tikv store: close: %w", err)
	}
	return nil
}

// acquire checks ctx and that the store is open, holds it open until release, and
// returns ctx bounded by OpTimeout (cancelled by release).
func (s *Store) acquire(ctx context.Context, op string) (_ context.Context, release func(), err error) {
	return s.acquireFor(ctx, op, 0)
}

// acquireFor is acquire with extra time on top of OpTimeout.
func (s *Store) acquireFor(ctx context.Context, op string, extra time.Duration) (_ context.Context, release func(), err error) {
	if err := ctx.Err(); err != nil {
		return ctx, nil, fmt.Errorf("tikv store: %s: %w", op, err)
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ctx, nil, downloader.Errorf(downloader.EUNAVAILABLE, "the store is closed")
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout+extra)
	return ctx, func() { cancel(); s.mu.RUnlock() }, nil
}

// unavailable wraps a TiKV failure of op: the caller sees EUNAVAILABLE with a safe message,
// the log sees the cause. A cancelled context is passed through as is; a deadline is
// TiKV not answering in time.
func unavailable(op string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("tikv store: %s: %w", op, err)
	}
	return fmt.Errorf("tikv store: %s: %w", op, errors.Join(
		downloader.Errorf(downloader.EUNAVAILABLE, "the cluster store (TiKV) is unavailable"), errNoAnswer, err))
}

// errNoAnswer marks an operation that failed because TiKV or PD did not answer in time, or
// answered with an error (unavailable): trying again later may succeed.
var errNoAnswer = errors.New("TiKV did not answer")

// timestamp returns a fresh timestamp from PD's TSO, giving up when ctx ends (client-go's
// Begin would retry for 15 s whatever the caller's deadline).
func (s *Store) timestamp(ctx context.Context) (uint64, error) {
	bo := tikvclient.NewBackofferWithVars(ctx, tsoMaxBackoffMs, nil)
	ts, err := s.kv.GetTimestampWithRetry(bo, oracle.GlobalTxnScope)
	if err != nil {
		return 0, err
	}
	return ts, nil
}

// begin starts an optimistic transaction at a fresh timestamp, with one-phase commit and
// async commit on (TiKV 5.0 and later; client-go's default limits, 256 keys and 4 KiB of
// keys for async commit, hold for every transaction of the store but a page's).
//
// One-phase commit: a transaction whose keys are in one region, such as every admission
// (one key), is written by its prewrite, with no lock left and no commit request. That is
// one TiKV round trip fewer than two-phase commit (read, prewrite, commit), and a
// concurrent reader of the key (another instance's admission of the domain) never finds
// a lock to wait on or resolve. It takes as many timestamps as two-phase commit: the
// second, for linearizability, is fetched before the prewrite instead of after it. When
// 1PC does not apply (keys in several regions) the client falls back to async commit
// (returns once every key is prewritten, commits in the background); when TiKV declines,
// to two-phase commit. The mock cluster ignores both: there every transaction falls back
// to two-phase commit after the extra timestamp (docs/benchmarks-tikv.md).
func (s *Store) begin(ctx context.Context) (*transaction.KVTxn, error) {
	ts, err := s.timestamp(ctx)
	if err != nil {
		return nil, err
	}
	txn, err := s.kv.Begin(tikvclient.WithStartTS(ts))
	if err != nil {
		return nil, err
	}
	txn.SetEnable1PC(!s.twoPC)
	txn.SetEnableAsyncCommit(!s.twoPC)
	return txn, nil
}

// get reads key at a fresh snapshot; ok is false when it does not exist.
func (s *Store) get(ctx context.Context, key []byte) (v []byte, ok bool, err error) {
	ts, err := s.timestamp(ctx)
	if err != nil {
		return nil, false, err
	}
	v, err = s.kv.GetSnapshot(ts).Get(ctx, key)
	if isNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

// isConflict reports whether err means that another transaction wrote one of the keys
// since this one started (or left a retryable state): the caller retries with a fresh
// transaction.
func isConflict(err error) bool {
	var retryable *tikverr.ErrRetryable
	var latch *tikverr.ErrWriteConflictInLatch
	return tikverr.IsErrWriteConflict(err) || errors.As(err, &retryable) || errors.As(err, &latch)
}

// maxAttempts bounds the retries of a transaction that keeps conflicting.
const maxAttempts = 50

// update runs f in a fresh transaction and commits it, again and again while the commit
// conflicts with another transaction (with a short growing pause), until ctx ends.
func (s *Store) update(ctx context.Context, f func(txn *transaction.KVTxn) error) error {
	pause := time.Millisecond
	for attempt := 1; ; attempt++ {
		txn, err := s.begin(ctx)
		if err != nil {
			return err
		}
		if err := f(txn); err != nil {
			_ = txn.Rollback()
			return err
		}
		err = txn.Commit(ctx)
		if err == nil || !isConflict(err) || attempt == maxAttempts {
			return err
		}
		s.conflicts.Add(1)
		t := time.NewTimer(rand.N(pause) + pause/2)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// isNotFound reports whether err says that the key read does not exist.
func isNotFound(err error) bool { return tikverr.IsErrNotFound(err) }

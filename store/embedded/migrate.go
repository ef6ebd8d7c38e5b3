package embedded

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"downloader/store/keys"
)

// Key names used before SPEC §5's two-table rule was applied to the key layout. A data
// directory written by such a build is moved to the current names at Open, so that a
// restart after an upgrade loses neither the settings, the results nor a pending report.
const (
	oldSettings      = "downloader:settings:global"
	oldFetchResult   = "downloader:fetch_result:" // followed directly by the 32-digit id
	oldByDomain      = "downloader:fetch_result_by_domain:"
	oldReportOutbox  = "downloader:report_outbox:"
	migrateBatchSize = 10_000
)

// keyMove renames every key under from that match accepts to to + the rest of the key.
type keyMove struct {
	from, to string
	match    func(rest []byte) bool
}

func anyRest([]byte) bool { return true }

// isID reports whether rest is exactly a record id: the old record prefix is also the
// prefix of the current key forms (downloader:fetch_result:id:, :domain:), which are not
// to be moved.
func isID(rest []byte) bool { return len(rest) == keys.IDLen && keys.IsLowerHex(string(rest)) }

// migrate moves keys written under the old names to the current ones. Each batch moves
// whole keys (the new key set and the old one deleted together) and is synced, so a crash
// in the middle leaves every entry under exactly one of its names and the next Open goes
// on where this one stopped. A directory with nothing to move costs four empty seeks.
func (s *Store) migrate() error {
	moves := []keyMove{
		{from: oldSettings, to: keys.Settings, match: func(rest []byte) bool { return len(rest) == 0 }},
		{from: oldFetchResult, to: keys.FetchResult, match: isID},
		{from: oldByDomain, to: keys.FetchResultByDomain, match: anyRest},
		{from: oldReportOutbox, to: ReportOutboxPrefix, match: anyRest},
	}
	for _, m := range moves {
		n, err := s.moveKeys(m)
		if err != nil {
			return fmt.Errorf("embedded store: move %s* to %s*: %w", m.from, m.to, err)
		}
		if n > 0 {
			s.logger.Info("store: keys moved to their current names", "from", m.from, "to", m.to, "key_count", n)
		}
	}
	return nil
}

func (s *Store) moveKeys(m keyMove) (moved int, err error) {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(m.from), UpperBound: keys.PrefixEnd(m.from)})
	if err != nil {
		return 0, err
	}
	b := s.db.NewBatch()
	defer func() {
		err = errors.Join(err, iter.Close(), b.Close())
	}()
	for ok := iter.First(); ok; ok = iter.Next() {
		k := iter.Key()
		rest := k[len(m.from):]
		if !m.match(rest) {
			continue
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			return moved, err
		}
		if err := b.Set(append([]byte(m.to), rest...), v, nil); err != nil {
			return moved, err
		}
		if err := b.Delete(k, nil); err != nil {
			return moved, err
		}
		moved++
		if moved%migrateBatchSize == 0 {
			if err := b.Commit(pebble.Sync); err != nil {
				return moved, err
			}
			b.Reset()
		}
	}
	if err := iter.Error(); err != nil {
		return moved, err
	}
	if !b.Empty() {
		return moved, b.Commit(pebble.Sync)
	}
	return moved, nil
}

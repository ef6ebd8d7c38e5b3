package tikv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader"
	"downloader/store/keys"
	"downloader/store/pagevalue"
)

// chunkSize bounds the compressed body kept in one value. TiKV is at its best with small
// values, and a raft entry is at most 8 MiB by default while a page may be 10 MiB. A page
// whose compressed body is larger is stored Chunked (package pagevalue): the head value
// holds the metadata, page:content:{sha256}:{n} the chunks.
const chunkSize = 256 << 10

func chunkKey(key string, n int) []byte {
	return fmt.Appendf(nil, "%s%s:%04x", keys.PageContent, key, n)
}

// PutPage stores p's body under its content hash and returns the key (the lower-case hex
// SHA-256 of the body). A body already stored is not written again: the first page stored
// with a body keeps its metadata. Two instances storing one body at once both get the key;
// the transaction that commits second fails on the conflict, sees the page and writes
// nothing. It then records the page as its URL's latest (pageindex.go).
func (s *Store) PutPage(ctx context.Context, p *downloader.Page) (string, error) {
	if p == nil {
		return "", downloader.Invalidf("page", "page is required")
	}
	key, err := s.putPage(ctx, p)
	if err != nil {
		return key, err
	}
	return key, s.indexPage(ctx, p, key)
}

func (s *Store) putPage(ctx context.Context, p *downloader.Page) (string, error) {
	sum := sha256.Sum256(p.Body)
	key := hex.EncodeToString(sum[:])
	headKey := []byte(keys.PageContent + key)

	// Most repeated bodies are caught here, before paying for compression.
	exists, err := s.hasPage(ctx, headKey)
	if err != nil || exists {
		return key, err
	}
	// Compressed outside the operation's time bound: it is our CPU, not TiKV.
	head, chunks := s.codec.Encode(p, chunkSize)
	size := len(head)
	for _, c := range chunks {
		size += len(c)
	}
	ctx, release, err := s.acquireFor(ctx, "put page", time.Duration(size>>20)*time.Second)
	if err != nil {
		return "", err
	}
	defer release()
	err = s.update(ctx, func(txn *transaction.KVTxn) error {
		if _, err := txn.Get(ctx, headKey); !isNotFound(err) {
			if err != nil {
				return err
			}
			return errPageExists
		}
		if err := txn.Set(headKey, head); err != nil {
			return err
		}
		for i, c := range chunks {
			if err := txn.Set(chunkKey(key, i), c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errPageExists) {
		return "", unavailable("put page "+key, err)
	}
	return key, nil
}

// hasPage reports whether the page's head key exists.
func (s *Store) hasPage(ctx context.Context, headKey []byte) (bool, error) {
	ctx, release, err := s.acquire(ctx, "put page")
	if err != nil {
		return false, err
	}
	defer release()
	_, ok, err := s.get(ctx, headKey)
	if err != nil {
		return false, unavailable("put page", err)
	}
	return ok, nil
}

// errPageExists ends PutPage's transaction when another one stored the body first.
var errPageExists = errors.New("page exists")

// Page returns the page stored under key, or an ENOTFOUND error when there is none
// (including for a string that cannot be a page key).
func (s *Store) Page(ctx context.Context, key string) (*downloader.Page, error) {
	if len(key) != 2*sha256.Size || !keys.IsLowerHex(key) {
		return nil, downloader.Errorf(downloader.ENOTFOUND, "page %q not found", key)
	}
	ctx, release, err := s.acquire(ctx, "get page")
	if err != nil {
		return nil, err
	}
	defer release()
	ts, err := s.timestamp(ctx)
	if err != nil {
		return nil, unavailable("get page", err)
	}
	snap := s.kv.GetSnapshot(ts)
	head, err := snap.Get(ctx, []byte(keys.PageContent+key))
	if err != nil {
		if isNotFound(err) {
			return nil, downloader.Errorf(downloader.ENOTFOUND, "page %q not found", key)
		}
		return nil, unavailable("get page", err)
	}
	format, meta, body, err := pagevalue.DecodeHead(head)
	if err == nil && meta.ChunkCount > pagevalue.MaxBodyBytes/chunkSize {
		err = fmt.Errorf("bad body length %d or chunk count %d", meta.BodyBytes, meta.ChunkCount)
	}
	if err != nil {
		return nil, fmt.Errorf("tikv store: page %s: %w", key, err)
	}
	if format == pagevalue.Chunked {
		chunkKeys := make([][]byte, meta.ChunkCount)
		for i := range chunkKeys {
			chunkKeys[i] = chunkKey(key, i)
		}
		got, err := snap.BatchGet(ctx, chunkKeys)
		if err != nil {
			return nil, unavailable("get page", err)
		}
		body = nil
		for i, k := range chunkKeys {
			c, ok := got[string(k)]
			if !ok {
				return nil, fmt.Errorf("tikv store: page %s: chunk %d is missing", key, i)
			}
			body = append(body, c...)
		}
	}
	p, err := s.codec.Page(key, meta, body)
	if err != nil {
		return nil, fmt.Errorf("tikv store: page %s: %w", key, err)
	}
	return p, nil
}

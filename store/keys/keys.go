// Package keys is the key layout shared by the store backends (store/embedded on Pebble,
// store/tikv on TiKV), so that both order, page and escape alike and pass one test suite
// (store/storetest). It does no I/O and holds no state.
//
// Keys follow SPEC §7, {service}:{table}:{key}. The downloader: namespace holds exactly
// two tables (SPEC §5), downloader:fetch_result and downloader:domain_runtime; everything
// else lives under another service's name:
//
//	downloader:fetch_result:id:{id}                  one FetchResult, JSON
//	downloader:fetch_result:domain:{domain}:{id}     the table's index by domain, empty value
//	config:downloader:global                         the service-wide Settings, JSON
//	page:content:{sha256}                            one page of the page store
//
// The index is part of the fetch_result table (a second key form of the same rows, written
// in the same atomic batch or transaction), not a table of its own. The settings are
// configuration, not downloader data, hence the config service. The two key forms of
// fetch_result start with "id:" and "domain:", so a scan of one never meets the other.
//
// {id} is 32 lower-case hex digits: 16 of the bitwise complement of fetched_at in Unix
// nanoseconds, then 16 of the complement of an insertion sequence, so ascending key order
// is newest first (ties on fetched_at: the later insertion first), and {id} is also the
// paging cursor. {domain} is escaped by EscapeDomain. Each backend documents what it
// stores beyond these.
package keys

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"
)

// Key prefixes and fixed keys common to both backends.
const (
	Settings            = "config:downloader:global"
	FetchResult         = "downloader:fetch_result:id:"
	FetchResultByDomain = "downloader:fetch_result:domain:"
	PageContent         = "page:content:"
	// PageByURL + the hex SHA-256 of a URL: that URL's latest page and validators
	// (downloader.PageRef as JSON), for conditional requests.
	PageByURL = "page:by_url:"
)

// PageByURLKey is the key of url's latest-page entry.
func PageByURLKey(url string) []byte {
	sum := sha256.Sum256([]byte(url))
	return []byte(PageByURL + hex.EncodeToString(sum[:]))
}

// IDLen is the length of a record id.
const IDLen = 32

// Paging bounds of FetchResults: a limit of 0 means DefaultLimit; anything outside
// 1..MaxLimit is refused.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// The range of fetched_at a record may have: its nanoseconds must fit the id.
var (
	MinFetchedAt = time.Unix(0, 0)
	MaxFetchedAt = time.Unix(0, 1<<63-1)
)

// ResultID returns the id of a record fetched at t with insertion sequence seq. A later
// insertion must use a larger seq for ties to list it first.
func ResultID(t time.Time, seq uint64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], ^uint64(t.UnixNano()))
	binary.BigEndian.PutUint64(b[8:], ^seq)
	return hex.EncodeToString(b[:])
}

// ValidID reports whether id has the form of a record id (and so of a cursor).
func ValidID(id string) bool {
	return len(id) == IDLen && IsLowerHex(id)
}

// ResultKey is the key of record id.
func ResultKey(id string) []byte { return []byte(FetchResult + id) }

// ByDomainPrefix is the prefix of domain's index entries.
func ByDomainPrefix(domain string) string { return FetchResultByDomain + EscapeDomain(domain) + ":" }

// ByDomainKey is the index entry of record id under domain.
func ByDomainKey(domain, id string) []byte { return []byte(ByDomainPrefix(domain) + id) }

// EscapeDomain percent-encodes '%' and ':' so that a domain is one key segment. Normalised
// host names contain neither, so their keys stay readable; IPv6 literals contain ':'.
func EscapeDomain(d string) string {
	if !strings.ContainsAny(d, "%:") {
		return d
	}
	var b strings.Builder
	for i := 0; i < len(d); i++ {
		switch c := d[i]; c {
		case '%':
			b.WriteString("%25")
		case ':':
			b.WriteString("%3A")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// UnescapeDomain reverses EscapeDomain.
func UnescapeDomain(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	return strings.NewReplacer("%3A", ":", "%25", "%").Replace(s)
}

// PrefixEnd returns the smallest key greater than every key that starts with prefix: prefix
// with its last byte below 0xff incremented, or nil (no upper bound) when it is all 0xff.
func PrefixEnd(prefix string) []byte {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// IsLowerHex reports whether s has only the digits 0-9 and a-f.
func IsLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

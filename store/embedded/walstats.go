package embedded

// WALBytesIn is how many bytes the store's commits have handed its write-ahead log since
// it was opened (Pebble's logical WAL bytes: keys, values and batch headers). Each is
// written again by a flush and by compactions later, so bytes per task end is what the
// benchmarks divide it by (bench/leasebench).
func (s *Store) WALBytesIn() uint64 {
	return s.db.Metrics().WAL.BytesIn
}

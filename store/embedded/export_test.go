package embedded

// PageWriteCount counts the pages s actually wrote, for the tests of package embedded_test.
func PageWriteCount(s *Store) int64 { return s.pageWriteCount.Load() }

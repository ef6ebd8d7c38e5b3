package limiter

import "downloader"

// sourceCode and entryCode store an IntervalSource and an Entry in one byte each.
type sourceCode uint8

const (
	sourceNone sourceCode = iota
	sourceLease
	sourceRequest
	sourceDefault
)

func sourceCodeOf(s downloader.IntervalSource) sourceCode {
	switch s {
	case downloader.IntervalSourceLease:
		return sourceLease
	case downloader.IntervalSourceRequest:
		return sourceRequest
	case downloader.IntervalSourceDefault:
		return sourceDefault
	}
	return sourceNone
}

func (c sourceCode) source() downloader.IntervalSource {
	switch c {
	case sourceLease:
		return downloader.IntervalSourceLease
	case sourceRequest:
		return downloader.IntervalSourceRequest
	case sourceDefault:
		return downloader.IntervalSourceDefault
	}
	return ""
}

type entryCode uint8 // 0: none; i+1: downloader.Entries[i]

func entryCodeOf(e downloader.Entry) entryCode {
	for i, x := range downloader.Entries {
		if x == e {
			return entryCode(i + 1)
		}
	}
	return 0
}

func (c entryCode) entry() downloader.Entry {
	if c == 0 || int(c) > len(downloader.Entries) {
		return ""
	}
	return downloader.Entries[c-1]
}

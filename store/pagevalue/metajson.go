package pagevalue

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendMeta appends m as JSON, byte for byte what json.Marshal(m) writes, so that the
// stored format does not change and every value written before still decodes the same.
// It is written by hand because json.Marshal reflects over the struct and the header map
// on every stored page of entry A's task end (a profile of it showed the allocations).
// The table and fuzz tests hold it equal to json.Marshal.
func appendMeta(dst []byte, m *Meta) []byte {
	year := m.FetchedAt.Year()
	if year < 0 || year > 9999 {
		// time.Time.MarshalJSON refuses such a year and so does json.Marshal: keep its
		// result (the error was never returned by Encode either).
		b, _ := json.Marshal(m)
		return append(dst, b...)
	}
	dst = append(dst, `{"url":`...)
	dst = appendJSONString(dst, m.URL)
	dst = append(dst, `,"final_url":`...)
	dst = appendJSONString(dst, m.FinalURL)
	dst = append(dst, `,"content_type":`...)
	dst = appendJSONString(dst, m.ContentType)
	dst = append(dst, `,"fetched_at":"`...)
	// RFC 3339 with nanoseconds is what time.Time.MarshalJSON writes for years 0–9999.
	dst = m.FetchedAt.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","body_bytes":`...)
	dst = strconv.AppendInt(dst, int64(m.BodyBytes), 10)
	if m.ChunkCount != 0 {
		dst = append(dst, `,"chunk_count":`...)
		dst = strconv.AppendInt(dst, int64(m.ChunkCount), 10)
	}
	if len(m.ResponseHeaders) != 0 {
		dst = append(dst, `,"response_headers":`...)
		dst = appendHeaders(dst, m.ResponseHeaders)
	}
	return append(dst, '}')
}

// appendHeaders appends h as json.Marshal writes a map[string][]string: keys sorted, a
// nil slice as null.
func appendHeaders(dst []byte, h map[string][]string) []byte {
	var buf [32]string // a response's header count fits without an allocation
	keys := buf[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		vs := h[k]
		if vs == nil {
			dst = append(dst, "null"...)
			continue
		}
		dst = append(dst, '[')
		for j, v := range vs {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, v)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendJSONString appends s quoted as encoding/json does with its default HTML escaping:
// <, > and & as \u003c, \u003e, \u0026; U+2028 and U+2029 escaped; each byte of invalid
// UTF-8 as \ufffd; control characters as \b, \f, \n, \r, \t or \u00XX.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

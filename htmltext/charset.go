package htmltext

import (
	"bytes"
	"io"
	"mime"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html/charset"
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
)

// The one decoding rule (SPEC §3): every output that carries a page's text or HTML
// (raw_text_length, entry B's text and html, the page store's reader) reads the bytes as
// served through Charset, so that no two outputs of one page disagree on its characters.
//
// The charset is found as a browser finds it (the WHATWG encoding sniffing algorithm, as
// golang.org/x/net/html/charset implements it): a byte order mark, else the Content-Type's
// charset parameter, else a <meta charset> or <meta http-equiv=Content-Type> in the first
// 1024 bytes. Labels map to encodings as browsers map them (gb2312 is read as GBK, big5 as
// Big5-HKSCS, euc-kr as windows-949, shift_jis as Windows-31J). Without any declaration a
// body that is valid UTF-8 is UTF-8, anything else windows-1252: the charset package's own
// fallback looks at the first 1024 bytes only, so a page whose head is ASCII and whose
// Chinese body is UTF-8 would be read as windows-1252, every character as three.

// UTF8Name is the name Charset gives UTF-8.
const UTF8Name = "utf-8"

// Charset returns the encoding of body served with Content-Type contentType (which may be
// empty) and its WHATWG name. For UTF-8 the encoding is encoding.Nop.
func Charset(body []byte, contentType string) (encoding.Encoding, string) {
	e, name, certain := charset.DetermineEncoding(body, lenientContentType(contentType))
	// DetermineEncoding's fallback is the bare charmap.Windows1252; a <meta> that names
	// windows-1252 (or latin1, ascii: the same encoding) comes back wrapped by Lookup, so
	// the identity tells "nothing declared" from "declared windows-1252".
	if e == nil || name == UTF8Name || (!certain && e == charmap.Windows1252 && validUTF8(body)) {
		return encoding.Nop, UTF8Name
	}
	return e, name
}

// UTF8 returns body converted to UTF-8 from its charset (see Charset), with every byte
// that is not part of a character of that charset written as U+FFFD, as VisibleText
// does. A body that is already valid UTF-8 is returned as it is, without a copy.
func UTF8(body []byte, contentType string) []byte {
	e, _ := Charset(body, contentType)
	body = body[bomLen(body):]
	if e == encoding.Nop {
		return validUTF8Copy(body)
	}
	out, err := e.NewDecoder().Bytes(body)
	if err != nil {
		// The decoders of the WHATWG encodings replace what they cannot read; an error is
		// not expected. Reading the bytes as UTF-8 keeps the output valid.
		return validUTF8Copy(body)
	}
	return out
}

// UTF8Reader is UTF8 as a stream, for a caller that only reads the document once (a
// length): no decoded copy of the whole body is made. Invalid UTF-8 in a UTF-8 body is
// left for the reader (VisibleText and the length functions count it as U+FFFD).
func UTF8Reader(body []byte, contentType string) io.Reader {
	e, _ := Charset(body, contentType)
	body = body[bomLen(body):]
	if e == encoding.Nop {
		return bytes.NewReader(body)
	}
	return e.NewDecoder().Reader(bytes.NewReader(body))
}

// bomLen is the length of the byte order mark body starts with (Charset then took the
// encoding from it), 0 if none: a browser drops it, it is no character of the page.
func bomLen(body []byte) int {
	switch {
	case bytes.HasPrefix(body, []byte{0xef, 0xbb, 0xbf}):
		return 3
	case bytes.HasPrefix(body, []byte{0xfe, 0xff}), bytes.HasPrefix(body, []byte{0xff, 0xfe}):
		return 2
	}
	return 0
}

// lenientContentType returns contentType, or when its parameters do not parse (a stray
// "; =", a duplicate) its media type with the charset parameter a browser would still
// read in it: mime.ParseMediaType, which the charset package uses, rejects the whole
// header then.
func lenientContentType(contentType string) string {
	if _, _, err := mime.ParseMediaType(contentType); err == nil || contentType == "" {
		return contentType
	}
	mt := MediaType(contentType)
	for p := range strings.SplitSeq(contentType, ";") {
		k, v, ok := strings.Cut(p, "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "charset") {
			if v = strings.Trim(strings.TrimSpace(v), `"'`); v != "" {
				return mt + "; charset=" + v
			}
		}
	}
	return mt
}

// MediaType returns the lower-case media type of a Content-Type ("text/html" of
// "Text/HTML; charset=GBK"), also when its parameters do not parse. It is what
// mime.ParseMediaType returns as the media type (the part before the first ';',
// lower-cased and trimmed) without parsing the parameters: it runs several times per
// page, and the parse allocated a map each time. Already lower-case ASCII costs no copy.
func MediaType(contentType string) string {
	mt, _, _ := strings.Cut(contentType, ";")
	for i := 0; i < len(mt); i++ {
		if c := mt[i]; c >= utf8.RuneSelf || ('A' <= c && c <= 'Z') {
			return strings.TrimSpace(strings.ToLower(mt))
		}
	}
	return strings.TrimSpace(mt)
}

// IsHTML reports whether contentType is an HTML document.
func IsHTML(contentType string) bool {
	mt := MediaType(contentType)
	return mt == "text/html" || mt == "application/xhtml+xml"
}

// IsTextual reports whether contentType is text a charset applies to: text/*, the XML
// and JSON families, JavaScript. Other bodies (images, PDF, archives) are bytes, never
// decoded.
func IsTextual(contentType string) bool {
	mt := MediaType(contentType)
	switch {
	case strings.HasPrefix(mt, "text/"),
		mt == "application/xhtml+xml", mt == "application/xml", strings.HasSuffix(mt, "+xml"),
		mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/javascript", mt == "application/ecmascript", mt == "application/x-javascript":
		return true
	}
	return false
}

// validUTF8 reports whether body is UTF-8, allowing one character cut off at the end (a
// body truncated at the byte cap ends mid-character).
func validUTF8(body []byte) bool {
	if utf8.Valid(body) {
		return true
	}
	for i := len(body) - 1; i >= 0 && i >= len(body)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(body[i]) {
			return !utf8.FullRune(body[i:]) && utf8.Valid(body[:i])
		}
	}
	return false
}

// validUTF8Copy returns body if it is valid UTF-8, else a copy with each invalid byte
// replaced by U+FFFD (one per byte, as the length functions count them).
func validUTF8Copy(body []byte) []byte {
	if utf8.Valid(body) {
		return body
	}
	out := make([]byte, 0, len(body)+len(body)/2)
	for i := 0; i < len(body); {
		r, size := utf8.DecodeRune(body[i:])
		out = utf8.AppendRune(out, r) // RuneError for an invalid byte, size 1
		i += size
	}
	return out
}

// Text returns the text of a body as served with contentType, decoded by Charset: the
// visible text of an HTML document (VisibleText), the white-space-collapsed text of any
// other text/* body (as PlainTextLength counts it), and "" for anything else.
// utf8.RuneCountInString(Text(b, ct)) == TextLength(b, ct).
func Text(body []byte, contentType string) string {
	var sb strings.Builder
	w := walker{sb: &sb}
	w.body(body, contentType)
	return sb.String()
}

// TextUpTo is Text cut to at most maxBytes, at a character boundary, and whether it was
// cut: what one answer carries of a body (a body at the cap can make several times the cap
// of text, a NUL being a three-byte U+FFFD). Its buffer is sized once, not doubled.
func TextUpTo(body []byte, contentType string, maxBytes int) (string, bool) {
	var sb strings.Builder
	sb.Grow(min(len(body), maxBytes))
	w := walker{sb: &sb, maxBytes: maxBytes}
	w.body(body, contentType)
	return sb.String(), w.isCut
}

// TextLength is the length of Text, without building it: raw_text_length (SPEC §3).
func TextLength(body []byte, contentType string) int {
	var w walker
	w.body(body, contentType)
	return w.n
}

// body walks body as its content type says; a read error cannot happen on a byte slice
// (a decoder replaces what it cannot read).
func (w *walker) body(body []byte, contentType string) {
	if len(body) == 0 {
		return
	}
	switch {
	case IsHTML(contentType):
		_ = w.walk(UTF8Reader(body, contentType))
	case strings.HasPrefix(MediaType(contentType), "text/"):
		w.text(UTF8(body, contentType))
	}
}

// AsUTF8 returns a body as served with contentType the way every output shows it: a
// textual body (IsTextual) decoded to UTF-8 (UTF8) with its Content-Type's charset
// parameter set to utf-8, anything else as it is.
func AsUTF8(body []byte, contentType string) ([]byte, string) {
	if !IsTextual(contentType) {
		return body, contentType
	}
	return UTF8(body, contentType), withUTF8Charset(contentType)
}

// withUTF8Charset returns contentType with charset=utf-8, its other parameters kept.
func withUTF8Charset(contentType string) string {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return MediaType(contentType) + "; charset=utf-8"
	}
	params["charset"] = UTF8Name
	if s := mime.FormatMediaType(mt, params); s != "" {
		return s
	}
	return mt + "; charset=utf-8"
}

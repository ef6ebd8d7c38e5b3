// Package htmltext measures the visible text of an HTML document: raw_text_length for the
// page as served and text_length for the page as rendered use the same function, so the two
// numbers are comparable (SPEC §3).
//
// What counts as visible text (a streaming approximation of what a reader sees, not a
// layout engine):
//   - text nodes, with character references decoded (&amp; is one character);
//   - except inside script, style, noscript, template, svg, iframe, noembed, noframes,
//     datalist and title (wherever it appears: the title is the tab's label, not page text),
//     and except in the document head: the head ends at </head>, at <body>, at any element
//     that cannot live in a head, or at non-blank text, as in the HTML parser;
//   - runs of white space (Unicode White_Space, which includes U+00A0 and U+3000) collapse
//     to one space, leading and trailing white space is dropped, and block-level tags (p,
//     div, br, li, td, ...) separate words as white space does, so "a</p><p>b" is "a b";
//   - the length is in Unicode characters (runes); an invalid UTF-8 byte counts as one.
//
// VisibleText and VisibleTextLength read their input as UTF-8. A body as served goes
// through Text and TextLength (or UTF8, AsUTF8), which decode it first by the one rule every
// output shares (charset.go: BOM, Content-Type, <meta>, as browsers do). Broken
// HTML never makes these functions fail or panic; only a read error is returned. The
// functions keep no state between calls and are safe for concurrent use.
package htmltext

import (
	"errors"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// maxSkipDepth bounds the stack of open hidden elements; deeper nesting is only counted.
const maxSkipDepth = 256

// VisibleTextLength returns the number of characters of visible text in the HTML read
// from r. On a read error it returns the count so far and the error.
func VisibleTextLength(r io.Reader) (int, error) {
	var w walker
	err := w.walk(r)
	return w.n, err
}

// VisibleText returns the visible text of the HTML read from r, as VisibleTextLength
// counts it: utf8.RuneCountInString(VisibleText(r)) == VisibleTextLength(r), with invalid
// UTF-8 bytes written as U+FFFD.
func VisibleText(r io.Reader) (string, error) {
	var sb strings.Builder
	w := walker{sb: &sb}
	err := w.walk(r)
	return sb.String(), err
}

// PlainTextLength counts a plain-text body the way visible text is counted: white-space
// runs collapsed to one space, trimmed, in runes.
func PlainTextLength(b []byte) int {
	var w walker
	w.text(b)
	return w.n
}

type walker struct {
	sb           *strings.Builder // nil: count only
	maxBytes     int              // sb holds at most this many bytes (0: no bound)
	isCut        bool             // a character was left out of sb by maxBytes
	n            int
	started      bool // a character was emitted
	pendingSpace bool // white space seen since the last character
	inHead       bool
	bodySeen     bool
	skip         []atom.Atom // open hidden elements
	skipOverflow int         // hidden elements open beyond maxSkipDepth
}

func (w *walker) walk(r io.Reader) error {
	z := html.NewTokenizer(r)
	for {
		switch z.Next() {
		case html.ErrorToken:
			if err := z.Err(); !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		case html.TextToken:
			if w.skipping() {
				continue
			}
			t := z.Text()
			if w.inHead {
				if isBlank(t) {
					continue
				}
				w.inHead = false // text cannot live in a head: the body has begun
			}
			w.text(t)
		case html.StartTagToken:
			w.startTag(tagAtom(z.Raw()), true)
		case html.SelfClosingTagToken:
			w.startTag(tagAtom(z.Raw()), false)
		case html.EndTagToken:
			w.endTag(tagAtom(z.Raw()))
		}
	}
}

// maxTagName is longer than any element name this package tells apart.
const maxTagName = 16

// tagAtom reads the element name out of a raw tag token ("<P class=x>", "</svg >") without
// allocating, as Tokenizer.TagName would (it copies); names it has no use for give 0.
func tagAtom(raw []byte) atom.Atom {
	i := 1 // past '<'
	if i < len(raw) && raw[i] == '/' {
		i++
	}
	var buf [maxTagName]byte
	n := 0
	for ; i < len(raw); i++ {
		c := raw[i]
		if c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == '/' || c == '>' {
			break
		}
		if n == maxTagName {
			return 0
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[n] = c
		n++
	}
	return atom.Lookup(buf[:n])
}

func (w *walker) startTag(a atom.Atom, opens bool) {
	if w.inHead && !inHeadElement(a) {
		w.inHead = false
	}
	switch {
	case a == atom.Head:
		if !w.bodySeen {
			w.inHead = true
		}
		return
	case a == atom.Body:
		w.bodySeen = true
		w.inHead = false
	case opens && hidden(a):
		if len(w.skip) < maxSkipDepth {
			w.skip = append(w.skip, a)
		} else {
			w.skipOverflow++
		}
		return
	}
	if separates(a) && !w.skipping() {
		w.space()
	}
}

func (w *walker) endTag(a atom.Atom) {
	switch {
	case a == atom.Head:
		w.inHead = false
		return
	case hidden(a):
		if w.skipOverflow > 0 {
			w.skipOverflow--
			return
		}
		for i := len(w.skip) - 1; i >= 0; i-- {
			if w.skip[i] == a {
				w.skip = w.skip[:i]
				break
			}
		}
		return
	}
	if separates(a) && !w.skipping() {
		w.space()
	}
}

func (w *walker) skipping() bool { return len(w.skip) > 0 || w.skipOverflow > 0 }

// space records a word boundary.
func (w *walker) space() {
	if w.started {
		w.pendingSpace = true
	}
}

// text emits the characters of t, collapsing white space.
func (w *walker) text(t []byte) {
	for i := 0; i < len(t); {
		c := t[i]
		if c < utf8.RuneSelf {
			i++
			if asciiSpace[c] {
				w.space()
				continue
			}
			w.emit(rune(c))
			continue
		}
		r, size := utf8.DecodeRune(t[i:])
		i += size
		if unicode.IsSpace(r) {
			w.space()
			continue
		}
		w.emit(r)
	}
}

func (w *walker) emit(r rune) {
	if w.sb != nil && w.maxBytes > 0 && w.sb.Len()+1+utf8.RuneLen(r) > w.maxBytes {
		w.sb = nil // full: count only from here on
		w.isCut = true
	}
	if w.pendingSpace {
		w.pendingSpace = false
		w.n++
		if w.sb != nil {
			w.sb.WriteByte(' ')
		}
	}
	w.started = true
	w.n++
	if w.sb != nil {
		w.sb.WriteRune(r)
	}
}

// asciiSpace is unicode.IsSpace on ASCII.
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

func isBlank(t []byte) bool {
	for i := 0; i < len(t); {
		c := t[i]
		if c < utf8.RuneSelf {
			if !asciiSpace[c] {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(t[i:])
		if !unicode.IsSpace(r) {
			return false
		}
		i += size
	}
	return true
}

// hidden reports whether an element's content is never shown as page text.
func hidden(a atom.Atom) bool {
	switch a {
	case atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Svg, atom.Title,
		atom.Iframe, atom.Noembed, atom.Noframes, atom.Datalist:
		return true
	}
	return false
}

// inHeadElement reports whether an element may appear in a head without ending it.
func inHeadElement(a atom.Atom) bool {
	switch a {
	case atom.Html, atom.Head, atom.Base, atom.Basefont, atom.Bgsound, atom.Link, atom.Meta,
		atom.Title, atom.Noscript, atom.Noframes, atom.Style, atom.Script, atom.Template:
		return true
	}
	return false
}

// separates reports whether an element breaks words apart (block-level and line breaks).
func separates(a atom.Atom) bool {
	switch a {
	case atom.Address, atom.Article, atom.Aside, atom.Blockquote, atom.Body, atom.Br,
		atom.Caption, atom.Dd, atom.Details, atom.Dialog, atom.Div, atom.Dl, atom.Dt,
		atom.Fieldset, atom.Figcaption, atom.Figure, atom.Footer, atom.Form, atom.H1, atom.H2,
		atom.H3, atom.H4, atom.H5, atom.H6, atom.Header, atom.Hgroup, atom.Hr, atom.Html,
		atom.Img, atom.Input, atom.Legend, atom.Li, atom.Main, atom.Menu, atom.Nav, atom.Ol,
		atom.Optgroup, atom.Option, atom.P, atom.Pre, atom.Section, atom.Select, atom.Summary,
		atom.Table, atom.Tbody, atom.Td, atom.Textarea, atom.Tfoot, atom.Th, atom.Thead,
		atom.Tr, atom.Ul:
		return true
	}
	return false
}

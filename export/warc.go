package export

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/nlnwa/gowarc/v3"

	"downloader"
)

// WARCWriter writes WARC/1.1 records through gowarc, each record its own gzip member when
// compressed (the .warc.gz convention, so that a reader can seek to any record). Records
// carry SHA-1 block and payload digests in base32, the form the common replay and
// indexing tools expect.
//
// What the page store keeps decides what is written: the body as served (or, for a
// rendered task, the DOM after render), its Content-Type, the URL and final URL, and the
// fetch time, and a plain fetch's response header fields as served. A plain fetch becomes
// a request record and a response record whose HTTP head is the status line and the
// headers as served (writeServedHeaders; a page stored before headers were kept gets its
// Content-Type only); a render becomes a resource record of the rendered HTML, since it is not one
// HTTP response. A body cut at the size cap carries WARC-Truncated: length.
//
// Dedup: the page store keeps one body once (its key is the body's SHA-256, the payload
// digest the crawl deduplicates on). The first task of a body gets the records above;
// every later task with the same page key (the same body under another URL) gets a
// revisit record of the identical-payload-digest profile instead, whose
// WARC-Refers-To, WARC-Refers-To-Target-URI and WARC-Refers-To-Date name the first
// record, and whose WARC-Payload-Digest (SHA-1, base32) is the first record's, with only
// the HTTP head as its block. RevisitCount counts them.
//
// Not safe for concurrent use.
type WARCWriter struct {
	w         *countWriter
	gzip      bool
	userAgent string
	warcinfo  string // its record id
	opts      []gowarc.WarcRecordOption
	marshal   gowarc.Marshaler
	// refs: page key → the record that holds its payload, for the revisits.
	refs     map[string]*gowarc.RevisitRef
	revisits int
}

// NewWARCWriter returns a writer on w that starts with a warcinfo record naming software
// and the file name; compress gzips each record.
func NewWARCWriter(w io.Writer, compress bool, filename, software, userAgent string, now time.Time) (*WARCWriter, error) {
	ww := &WARCWriter{w: &countWriter{w: w}, gzip: compress, userAgent: userAgent, marshal: gowarc.NewMarshaler(),
		refs: map[string]*gowarc.RevisitRef{},
		opts: []gowarc.WarcRecordOption{
			gowarc.WithAddMissingDigest(true), gowarc.WithDefaultDigestAlgorithm("sha1"),
			gowarc.WithDefaultDigestEncoding(gowarc.Base32), gowarc.WithAddMissingContentLength(true),
			gowarc.WithBufferMaxMemBytes(16 << 20), gowarc.WithStrictValidation(),
		}}
	b := gowarc.NewRecordBuilder(gowarc.Warcinfo, ww.opts...)
	fmt.Fprintf(b, "software: %s\r\nformat: WARC File Format 1.1\r\nconformsTo: https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/\r\nhttp-header-user-agent: %s\r\n", software, userAgent)
	b.AddWarcHeaderTime(gowarc.WarcDate, now.UTC())
	b.AddWarcHeader(gowarc.ContentType, "application/warc-fields")
	if filename != "" {
		b.AddWarcHeader(gowarc.WarcFilename, filename)
	}
	id, err := ww.write(b)
	if err != nil {
		return nil, err
	}
	ww.warcinfo = id
	return ww, nil
}

// RevisitCount is how many revisit records were written (pages whose body an earlier
// record holds).
func (ww *WARCWriter) RevisitCount() int { return ww.revisits }

// ByteCount is how many bytes were written.
func (ww *WARCWriter) ByteCount() int64 { return ww.w.n }

// WritePage writes the records of one stored page of task t.
func (ww *WARCWriter) WritePage(t *Task, p *downloader.Page) error {
	target := p.FinalURL
	if target == "" {
		target = p.URL
	}
	at := p.FetchedAt.UTC()
	truncated := t.Report != nil && t.Report.HealthSignal != nil && t.Report.HealthSignal.IsBodyTruncated
	ct := p.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	if t.Status.ShouldRender {
		b := gowarc.NewRecordBuilder(gowarc.Resource, ww.opts...)
		if _, err := b.Write(p.Body); err != nil {
			return fmt.Errorf("warc: %w", err)
		}
		ww.headers(b, target, at, truncated)
		b.AddWarcHeader(gowarc.ContentType, ct)
		_, err := ww.writePayload(b, p.PageKey)
		return err
	}
	u, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("warc: target %q: %w", target, err)
	}
	status := http.StatusOK
	if t.Report != nil && t.Report.HTTPStatus != nil {
		status = *t.Report.HTTPStatus
	}
	var resp bytes.Buffer
	fmt.Fprintf(&resp, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	writeServedHeaders(&resp, p.ResponseHeaders, ct, len(p.Body))
	rb := gowarc.NewRecordBuilder(gowarc.Response, ww.opts...)
	if _, err := rb.Write(resp.Bytes()); err != nil {
		return fmt.Errorf("warc: %w", err)
	}
	if _, err := rb.Write(p.Body); err != nil {
		return fmt.Errorf("warc: %w", err)
	}
	ww.headers(rb, target, at, truncated)
	protocol := warcProtocol(t)
	if protocol != "" {
		rb.AddWarcHeader(warcProtocolField, protocol)
	}
	rb.AddWarcHeader(gowarc.ContentType, "application/http;msgtype=response")
	respID, err := ww.writePayload(rb, p.PageKey)
	if err != nil {
		return err
	}
	path := u.RequestURI()
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\nAccept-Encoding: gzip, deflate, br, zstd\r\n\r\n", path, u.Host, ww.userAgent)
	qb := gowarc.NewRecordBuilder(gowarc.Request, ww.opts...)
	if _, err := qb.WriteString(req); err != nil {
		return fmt.Errorf("warc: %w", err)
	}
	ww.headers(qb, target, at, false)
	if protocol != "" {
		qb.AddWarcHeader(warcProtocolField, protocol)
	}
	qb.AddWarcHeader(gowarc.ContentType, "application/http;msgtype=request")
	qb.AddWarcHeader(gowarc.WarcConcurrentTo, "<"+respID+">")
	_, err = ww.write(qb)
	return err
}

// warcProtocolField names the protocol an exchange really used when its records show an
// HTTP/1.1 rendering of it: WARC/1.1 has no HTTP/2 form, so an HTTP/2 exchange is written
// as HTTP/1.1 (status line, headers, body: what replay tools read), as Heritrix does, and
// this field (the IIPC's proposed WARC-Protocol) says it was "h2" (docs/decisions.md).
const warcProtocolField = "WARC-Protocol"

// warcProtocol is the WARC-Protocol of t's exchange: "h2" over HTTP/2, else none (an
// HTTP/1.1 exchange is what the records show).
func warcProtocol(t *Task) string {
	if t.Report != nil && t.Report.HealthSignal != nil && t.Report.HealthSignal.HTTPVersion != nil &&
		*t.Report.HealthSignal.HTTPVersion == "2" {
		return "h2"
	}
	return ""
}

func (ww *WARCWriter) headers(b gowarc.WarcRecordBuilder, target string, at time.Time, truncated bool) {
	b.AddWarcHeader(gowarc.WarcTargetURI, target)
	b.AddWarcHeaderTime(gowarc.WarcDate, at)
	if ww.warcinfo != "" {
		b.AddWarcHeader(gowarc.WarcWarcinfoID, "<"+ww.warcinfo+">")
	}
	if truncated {
		b.AddWarcHeader(gowarc.WarcTruncated, "length")
	}
}

// writePayload writes the record that carries a page's payload: as built, the first time
// its page key is written, else as a revisit of that first record. It returns the id of
// the record written.
func (ww *WARCWriter) writePayload(b gowarc.WarcRecordBuilder, pageKey string) (string, error) {
	rec, validation, err := b.Build()
	if err != nil {
		return "", fmt.Errorf("warc: build record: %w (%v)", err, validation)
	}
	defer rec.Close()
	if pageKey == "" {
		return rec.RecordId(), ww.emit(rec)
	}
	if ref, ok := ww.refs[pageKey]; ok {
		rv, err := rec.ToRevisitRecord(ref)
		if err != nil {
			return "", fmt.Errorf("warc: revisit record: %w", err)
		}
		defer rv.Close()
		if err := ww.emit(rv); err != nil {
			return "", err
		}
		ww.revisits++
		return rv.RecordId(), nil
	}
	ref, err := rec.CreateRevisitRef(gowarc.ProfileIdenticalPayloadDigestV1_1)
	if err != nil {
		return "", fmt.Errorf("warc: revisit reference: %w", err)
	}
	if err := ww.emit(rec); err != nil {
		return "", err
	}
	ww.refs[pageKey] = ref
	return rec.RecordId(), nil
}

// write builds b's record and writes it, gzipped on its own when compressing; it returns
// the record's id.
func (ww *WARCWriter) write(b gowarc.WarcRecordBuilder) (string, error) {
	rec, validation, err := b.Build()
	if err != nil {
		return "", fmt.Errorf("warc: build record: %w (%v)", err, validation)
	}
	defer rec.Close()
	return rec.RecordId(), ww.emit(rec)
}

// emit writes rec, gzipped on its own when compressing.
func (ww *WARCWriter) emit(rec gowarc.WarcRecord) error {
	var out io.Writer = ww.w
	var gz *gzip.Writer
	if ww.gzip {
		gz = gzip.NewWriter(ww.w)
		out = gz
	}
	if _, _, err := ww.marshal.Marshal(out, rec, 0); err != nil {
		return fmt.Errorf("warc: write record: %w", err)
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return fmt.Errorf("warc: write record: %w", err)
		}
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeServedHeaders writes a response head's header fields: those served (sorted by name,
// values in order), except the ones that describe the bytes on the wire rather than the
// stored payload. The body is stored decoded (no Content-Encoding, no chunking), so
// Content-Encoding, Transfer-Encoding and Content-Length are replaced by the payload's own
// Content-Length; the served Content-Encoding is kept as X-Downloader-Content-Encoding so
// that nothing served is lost. Without served headers (an older page) it writes the
// Content-Type and Content-Length.
func writeServedHeaders(w *bytes.Buffer, served map[string][]string, contentType string, bodyLen int) {
	if len(served) == 0 {
		fmt.Fprintf(w, "Content-Type: %s\r\nContent-Length: %d\r\n\r\n", contentType, bodyLen)
		return
	}
	names := make([]string, 0, len(served))
	for name := range served {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		out := name
		switch http.CanonicalHeaderKey(name) {
		case "Content-Length", "Transfer-Encoding":
			continue
		case "Content-Encoding":
			out = "X-Downloader-Content-Encoding"
		}
		for _, v := range served[name] {
			fmt.Fprintf(w, "%s: %s\r\n", out, v)
		}
	}
	fmt.Fprintf(w, "Content-Length: %d\r\n\r\n", bodyLen)
}

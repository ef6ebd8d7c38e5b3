package fetch

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/andybalholm/brotli"

	"downloader/htmltext"
)

// acceptEncoding is what we ask for: the codings readBody decodes itself, so that the cap
// holds on decoded bytes.
const acceptEncoding = "gzip, deflate, br, zstd"

// maxCodings bounds a Content-Encoding chain; a longer one is left undecoded.
const maxCodings = 3

type bodyResult struct {
	body      []byte
	truncated bool  // the cap was reached, on the wire or decoded
	undecoded bool  // a content coding we do not decode: body is as sent
	decodeErr error // the body did not decode (corrupt or cut by the cap); body holds what did
	err       error // the network failed while reading: a fetch failure
}

// wireReader reads the body as sent, up to a cap, re-arming the stall timer whenever
// bytes arrive. It records the network's error apart from the decoders'.
type wireReader struct {
	r         io.Reader
	remaining int64 // bytes still allowed; one more than the cap, to tell "at" from "over"
	capped    bool
	err       error
	timer     *time.Timer
	stall     time.Duration
}

func (w *wireReader) Read(p []byte) (int, error) {
	if w.remaining <= 0 {
		w.capped = true
		return 0, io.EOF
	}
	if int64(len(p)) > w.remaining {
		p = p[:w.remaining]
	}
	n, err := w.r.Read(p)
	w.remaining -= int64(n)
	if n > 0 {
		w.timer.Reset(w.stall)
	}
	if err != nil && err != io.EOF {
		w.err = err
	}
	return n, err
}

// readBody reads resp's body, decoded, up to limit bytes (and limit+1 on the wire). A
// body that stalls for ResponseTimeout cancels the hop with errBodyStalls.
func (f *Fetcher) readBody(ctx context.Context, cancel context.CancelCauseFunc, resp *http.Response, limit int64) bodyResult {
	stall := f.cfg.ResponseTimeout
	timer := time.AfterFunc(stall, func() { cancel(errBodyStalls) })
	defer timer.Stop()
	wire := &wireReader{r: resp.Body, remaining: limit + 1, timer: timer, stall: stall}

	var res bodyResult
	var r io.Reader = wire
	codings, ok := contentCodings(resp.Header)
	if !ok {
		res.undecoded = true
		codings = nil
	}
	for i := len(codings) - 1; i >= 0; i-- {
		dr, err := decoder(codings[i], r)
		if err != nil {
			if wire.err != nil {
				res.err = wire.err
			} else {
				res.decodeErr = err
			}
			return res
		}
		r = dr
	}

	hint := int64(0)
	if len(codings) == 0 && resp.ContentLength > 0 {
		hint = resp.ContentLength + 1 // one more, to read the end without growing
	}
	body, err := readUpTo(r, limit+1, hint)
	if int64(len(body)) > limit {
		body = body[:limit]
		res.truncated = true
	}
	if wire.capped {
		res.truncated = true
	}
	switch {
	case wire.err != nil:
		res.err = wire.err
	case err != nil && ctx.Err() != nil:
		res.err = context.Cause(ctx)
	case err != nil:
		res.decodeErr = err
	}
	res.body = body
	return res
}

// firstBodyBytes is the first buffer of a body whose size is not known beforehand.
const firstBodyBytes = 32 << 10

// readUpTo reads r to its end or to n bytes, whichever comes first, into a buffer that
// starts at hint (or firstBodyBytes) and doubles, but never past n: a body that decodes
// past the cap costs at most n bytes of buffer (and n/2 more while the last growth
// copies), where a bytes.Buffer would double to the next power of two above the cap and
// keep the old buffer meanwhile. The error is r's, io.EOF excepted.
func readUpTo(r io.Reader, n, hint int64) ([]byte, error) {
	size := firstBodyBytes
	if hint > 0 {
		size = int(min(hint, n))
	}
	b := make([]byte, 0, min(int64(size), n))
	for {
		if len(b) == cap(b) {
			if int64(len(b)) >= n {
				return b, nil
			}
			grown := make([]byte, len(b), min(2*int64(cap(b))+1, n))
			copy(grown, b)
			b = grown
		}
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		switch {
		case err == io.EOF:
			return b, nil
		case err != nil:
			return b, err
		}
	}
}

// contentCodings lists the Content-Encoding chain in the order applied; ok is false when
// it holds a coding we do not decode or is too long.
func contentCodings(h http.Header) ([]string, bool) {
	var out []string
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			switch c {
			case "", "identity":
				continue
			case "gzip", "x-gzip", "deflate", "br", "zstd":
				out = append(out, c)
			default:
				return nil, false
			}
		}
	}
	if len(out) > maxCodings {
		return nil, false
	}
	return out, true
}

func decoder(coding string, r io.Reader) (io.Reader, error) {
	switch coding {
	case "gzip", "x-gzip":
		return gzip.NewReader(r)
	case "deflate":
		// "deflate" is meant to be zlib-wrapped, but some servers send raw deflate.
		br := bufio.NewReader(r)
		if h, err := br.Peek(2); err == nil && isZlibHeader(h) {
			return zlib.NewReader(br)
		}
		return flate.NewReader(br), nil
	case "br":
		return brotli.NewReader(r), nil
	case "zstd":
		return newZstdReader(r)
	}
	return r, nil
}

func isZlibHeader(h []byte) bool {
	return h[0]&0x0f == 8 && h[0]>>4 <= 7 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0
}

// contentType returns the Content-Type as sent, or the sniffed media type when none was.
// The sniffer's charset is dropped: it says utf-8 of any text without a BOM, which would
// outrank the page's own <meta charset=gbk> (a BOM it saw is in the body, and found there).
func contentType(header string, body []byte) string {
	if h := strings.TrimSpace(header); h != "" {
		return h
	}
	if len(body) == 0 {
		return ""
	}
	return htmltext.MediaType(http.DetectContentType(body))
}

// textLength is raw_text_length for a body of content type ct (see the package doc),
// decoded to UTF-8 by the one rule every output shares (htmltext.Charset). A body left
// undecoded (an unknown content coding) has no text.
func textLength(ct string, body []byte, undecoded bool) int {
	if undecoded {
		return 0
	}
	return htmltext.TextLength(body, ct)
}

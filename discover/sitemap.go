package discover

import (
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Sitemap bounds, those of the sitemaps protocol (sitemaps.org): a sitemap or sitemap
// index lists at most 50,000 URLs and is at most 50 MiB uncompressed. Past them the rest
// is ignored, not an error: what was read is used.
const (
	MaxSitemapURLCount = 50_000
	MaxSitemapBytes    = 50 << 20
)

// Sitemap is what a sitemap document lists.
type Sitemap struct {
	// IsIndex: a <sitemapindex>, whose URLs are further sitemaps; else a <urlset> of pages.
	IsIndex bool
	URLs    []string // the <loc> values, trimmed, in order, at most MaxSitemapURLCount
	// IsTruncated: the document had more than the bounds allow.
	IsTruncated bool
}

// ErrNotSitemap: the document is not a sitemap (its root is neither urlset nor
// sitemapindex).
var ErrNotSitemap = errors.New("not a sitemap")

// gzipMagic starts every gzip stream.
var gzipMagic = []byte{0x1f, 0x8b}

// LooksLikeSitemap reports, from its first bytes, whether body may be a sitemap: gzip, or
// XML whose root is urlset or sitemapindex. It reads no more than the head.
func LooksLikeSitemap(body []byte) bool {
	if bytes.HasPrefix(body, gzipMagic) {
		return true
	}
	head := body[:min(len(body), 1024)]
	return bytes.Contains(head, []byte("<urlset")) || bytes.Contains(head, []byte("<sitemapindex")) ||
		bytes.Contains(head, []byte(":urlset")) || bytes.Contains(head, []byte(":sitemapindex"))
}

// ParseSitemap reads a sitemap or sitemap index (XML, or gzipped XML as the .gz
// convention serves it: the body is gunzipped when it starts with gzip's magic bytes),
// within the bounds above. It returns ErrNotSitemap for another document, and an error
// for XML that breaks before the root element was found.
func ParseSitemap(body []byte) (*Sitemap, error) {
	return parseSitemap(body, MaxSitemapBytes, MaxSitemapURLCount)
}

// parseSitemap is ParseSitemap within the bounds given (tests use small ones).
func parseSitemap(body []byte, maxBytes int64, maxURLCount int) (*Sitemap, error) {
	var r io.Reader = bytes.NewReader(body)
	if bytes.HasPrefix(body, gzipMagic) {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("sitemap: gzip: %w", err)
		}
		defer zr.Close()
		r = zr
	}
	lr := &io.LimitedReader{R: r, N: maxBytes + 1}
	dec := xml.NewDecoder(lr)
	dec.Strict = false // as lenient as the usual sitemap readers; entities stay unexpanded
	dec.CharsetReader = func(_ string, in io.Reader) (io.Reader, error) { return in, nil }
	sm := &Sitemap{}
	root := ""
	depth := 0
	inLoc := false
	var loc strings.Builder
	for {
		tok, err := dec.Token()
		if err != nil {
			if root == "" {
				if err == io.EOF {
					return nil, ErrNotSitemap
				}
				return nil, fmt.Errorf("sitemap: %w", err)
			}
			// A document cut short (or past the size bound) keeps what was read.
			if err != io.EOF || lr.N <= 0 {
				sm.IsTruncated = true
			}
			return sm, nil
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			name := strings.ToLower(t.Name.Local)
			if depth == 1 {
				switch name {
				case "urlset":
				case "sitemapindex":
					sm.IsIndex = true
				default:
					return nil, ErrNotSitemap
				}
				root = name
				continue
			}
			// <urlset><url><loc> or <sitemapindex><sitemap><loc>, nothing deeper.
			if depth == 3 && name == "loc" {
				inLoc = true
				loc.Reset()
			}
		case xml.CharData:
			if inLoc && loc.Len() < maxURLBytes {
				loc.Write(t)
			}
		case xml.EndElement:
			if inLoc && depth == 3 {
				inLoc = false
				if u := strings.TrimSpace(loc.String()); u != "" {
					if len(sm.URLs) == maxURLCount {
						sm.IsTruncated = true
						return sm, nil
					}
					sm.URLs = append(sm.URLs, u)
				}
			}
			depth--
		}
	}
}

// maxURLBytes bounds one <loc>, as the service bounds any URL.
const maxURLBytes = 8192

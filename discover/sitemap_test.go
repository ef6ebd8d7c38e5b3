package discover

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func gzipped(t testing.TB, s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

const urlsetXML = `<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc> http://a.test/1 </loc><lastmod>2024-01-01</lastmod></url>
  <url><loc>http://a.test/2?x=1&amp;y=2</loc></url>
  <url><loc></loc></url>
  <url><image:image xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"><image:loc>http://a.test/img.png</image:loc></image:image><loc>http://a.test/3</loc></url>
</urlset>`

func TestParseSitemap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    []byte
		want    []string
		isIndex bool
		err     error
	}{
		{"urlset", []byte(urlsetXML), []string{"http://a.test/1", "http://a.test/2?x=1&y=2", "http://a.test/3"}, false, nil},
		{"urlset gzipped", gzipped(t, urlsetXML), []string{"http://a.test/1", "http://a.test/2?x=1&y=2", "http://a.test/3"}, false, nil},
		{"index", []byte(`<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><sitemap><loc>http://a.test/s1.xml.gz</loc></sitemap><sitemap><loc>http://a.test/s2.xml</loc></sitemap></sitemapindex>`),
			[]string{"http://a.test/s1.xml.gz", "http://a.test/s2.xml"}, true, nil},
		{"prefixed root", []byte(`<sm:urlset xmlns:sm="http://www.sitemaps.org/schemas/sitemap/0.9"><sm:url><sm:loc>http://a.test/p</sm:loc></sm:url></sm:urlset>`),
			[]string{"http://a.test/p"}, false, nil},
		{"cut short keeps what was read", []byte(`<urlset><url><loc>http://a.test/1</loc></url><url><loc>http://a.te`), []string{"http://a.test/1"}, false, nil},
		{"HTML", []byte(`<!doctype html><html><body>x</body></html>`), nil, false, ErrNotSitemap},
		{"RSS", []byte(`<rss><channel><item><link>http://a.test/</link></item></channel></rss>`), nil, false, ErrNotSitemap},
		{"empty", nil, nil, false, ErrNotSitemap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sm, err := ParseSitemap(tc.body)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(sm.URLs, tc.want) || sm.IsIndex != tc.isIndex {
				t.Errorf("got %+v, want %v index=%v", sm, tc.want, tc.isIndex)
			}
		})
	}
	if _, err := ParseSitemap([]byte{0x1f, 0x8b, 0, 0}); err == nil {
		t.Error("a broken gzip stream parsed")
	}
}

func TestParseSitemapBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("<urlset>")
	for i := range 110 {
		fmt.Fprintf(&b, "<url><loc>http://a.test/%d</loc></url>", i)
	}
	b.WriteString("</urlset>")
	sm, err := parseSitemap(gzipped(t, b.String()), MaxSitemapBytes, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(sm.URLs) != 100 || !sm.IsTruncated {
		t.Errorf("%d URLs, truncated %v; want 100, true", len(sm.URLs), sm.IsTruncated)
	}
	// A gzip bomb: far more than the byte bound of white space unpacks no further than it.
	const maxBytes = 4 << 20
	var bomb bytes.Buffer
	w, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	w.Write([]byte("<urlset><url><loc>http://a.test/x</loc></url>"))
	chunk := bytes.Repeat([]byte(" "), 1<<20)
	for range maxBytes>>20 + 8 {
		w.Write(chunk)
	}
	w.Write([]byte("<url><loc>http://a.test/after</loc></url></urlset>"))
	w.Close()
	sm, err = parseSitemap(bomb.Bytes(), maxBytes, MaxSitemapURLCount)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sm.URLs, []string{"http://a.test/x"}) || !sm.IsTruncated {
		t.Errorf("bomb: got %v truncated %v", sm.URLs, sm.IsTruncated)
	}
}

func TestLooksLikeSitemap(t *testing.T) {
	for body, want := range map[string]bool{
		urlsetXML:                          true,
		"<sitemapindex>":                   true,
		"\x1f\x8b...":                      true,
		"<!doctype html><p>urlset</p>":     false,
		`<?xml version="1.0"?><rss></rss>`: false,
	} {
		if got := LooksLikeSitemap([]byte(body)); got != want {
			t.Errorf("LooksLikeSitemap(%.30q) = %v", body, got)
		}
	}
}

func FuzzParseSitemap(f *testing.F) {
	f.Add([]byte(urlsetXML))
	f.Add(gzipped(f, urlsetXML))
	f.Add([]byte(`<sitemapindex><sitemap><loc>http://a.test/s.xml</loc></sitemap></sitemapindex>`))
	f.Add([]byte(`<urlset><url><loc><![CDATA[http://a.test/c]]></loc></url>`))
	f.Add([]byte(`<!DOCTYPE urlset [<!ENTITY a "aaaa">]><urlset><url><loc>&a;&a;</loc></url></urlset>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		sm, err := ParseSitemap(body)
		if err != nil {
			return
		}
		if len(sm.URLs) > MaxSitemapURLCount {
			t.Fatalf("%d URLs", len(sm.URLs))
		}
		for _, u := range sm.URLs {
			if u == "" || u != strings.TrimSpace(u) || len(u) > maxURLBytes+8 {
				t.Fatalf("URL %q", u)
			}
		}
	})
}

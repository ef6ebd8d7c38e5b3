package discover

import (
	"net/url"
	"reflect"
	"testing"
)

func TestExtractLinks(t *testing.T) {
	page, _ := url.Parse("http://a.test/dir/page.html")
	for _, tc := range []struct {
		name              string
		html              string
		want              []string
		nofollow, noindex bool
		nofollowLinkCount int
	}{
		{"relative and absolute", `<a href="x">1</a><a href="/y">2</a><a href="http://b.test/z">3</a><a href="//c.test/w">4</a>`,
			[]string{"http://a.test/dir/x", "http://a.test/y", "http://b.test/z", "http://c.test/w"}, false, false, 0},
		{"area, link rel=next and prev, not stylesheet", `<map><area href="/m"></map><link rel="next" href="/p2"><link rel="Prev" href="/p0"><link rel="stylesheet" href="/s.css"><link rel="canonical" href="/c">`,
			[]string{"http://a.test/m", "http://a.test/p2", "http://a.test/p0"}, false, false, 0},
		{"base href, even after a link", `<a href="early">e</a><head><base href="http://b.test/base/"><base href="http://ignored.test/"></head><a href="late">l</a>`,
			[]string{"http://b.test/base/early", "http://b.test/base/late"}, false, false, 0},
		{"relative base", `<base href="/sub/"><a href="x">x</a>`, []string{"http://a.test/sub/x"}, false, false, 0},
		{"rel=nofollow", `<a rel="external nofollow" href="/n">n</a><a href="/f">f</a>`, []string{"http://a.test/f"}, false, false, 1},
		{"meta robots nofollow", `<meta name="ROBOTS" content="noindex,NOFOLLOW"><a href="/x">x</a>`, nil, true, true, 0},
		{"meta robots none", `<meta name="robots" content="none"><a href="/x">x</a>`, nil, true, true, 0},
		{"meta robots noindex only", `<meta name="robots" content="noindex"><a href="/x">x</a>`, []string{"http://a.test/x"}, false, true, 0},
		{"another meta", `<meta name="googlebot" content="nofollow"><a href="/x">x</a>`, []string{"http://a.test/x"}, false, false, 0},
		{"not followed: other schemes, fragments, empty", `<a href="mailto:a@b">m</a><a href="javascript:go()">j</a><a href="#top">t</a><a href="">e</a><a>none</a><a href="data:text/html,x">d</a>`,
			nil, false, false, 0},
		{"entities and spaces", `<a href=" /q?a=1&amp;b=2 ">q</a>`, []string{"http://a.test/q?a=1&b=2"}, false, false, 0},
		{"broken HTML", `<a href="/ok">ok<a href='/also'<div><a href=/bare>`, []string{"http://a.test/ok", "http://a.test/also", "http://a.test/bare"}, false, false, 0},
		{"the first of a repeated attribute", `<a href="/first" href="/second">x</a>`, []string{"http://a.test/first"}, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ExtractLinks([]byte(tc.html), page)
			if !reflect.DeepEqual(got.URLs, tc.want) || got.IsNofollow != tc.nofollow || got.IsNoindex != tc.noindex || got.NofollowCount != tc.nofollowLinkCount {
				t.Errorf("got %+v, want %v nofollow=%v noindex=%v nofollow links %d", got, tc.want, tc.nofollow, tc.noindex, tc.nofollowLinkCount)
			}
		})
	}
}

func TestIsHTML(t *testing.T) {
	for _, tc := range []struct {
		ct   string
		body string
		want bool
	}{
		{"text/html; charset=utf-8", "", true},
		{"application/xhtml+xml", "", true},
		{"text/plain", "<html>", false},
		{"", "  <!DOCTYPE html><html>", true},
		{"", "<?xml version='1.0'?><urlset>", false},
	} {
		if got := IsHTML(tc.ct, []byte(tc.body)); got != tc.want {
			t.Errorf("IsHTML(%q, %q) = %v", tc.ct, tc.body, got)
		}
	}
}

func FuzzExtractLinks(f *testing.F) {
	for _, s := range []string{
		`<a href="/x">x</a>`, `<base href="http://b.test/"><a href="y">`, `<meta name=robots content=nofollow>`,
		`<area href="//c.test/%zz">`, `<a href="http://[::1]:80/a/../b#f">`, "<a href=\"\x00\">", `<link rel=next href="?p=2">`,
	} {
		f.Add([]byte(s))
	}
	page, _ := url.Parse("http://a.test/dir/")
	f.Fuzz(func(t *testing.T, body []byte) {
		l := ExtractLinks(body, page)
		if l.IsNofollow && len(l.URLs) > 0 {
			t.Fatalf("nofollow page gave links %v", l.URLs)
		}
		if len(l.URLs) > MaxLinkCount {
			t.Fatalf("%d links", len(l.URLs))
		}
		for _, s := range l.URLs {
			u, err := url.Parse(s)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !u.IsAbs() {
				t.Fatalf("link %q is not an absolute http(s) URL (%v)", s, err)
			}
			// Canonical of a link either fails or is stable.
			if c, _, err := Canonical(u); err == nil {
				if again, _, err := CanonicalString(c); err != nil || again != c {
					t.Fatalf("canonical form of %q not stable: %q → %q (%v)", s, c, again, err)
				}
			}
		}
	})
}

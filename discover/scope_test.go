package discover

import (
	"testing"

	"downloader"
)

func TestScope(t *testing.T) {
	type check struct {
		url  string
		want bool
	}
	for _, tc := range []struct {
		name   string
		cfg    ScopeConfig
		seeds  []string
		checks []check
	}{
		{"host (default)", ScopeConfig{}, []string{"www.shop.test"}, []check{
			{"http://www.shop.test/a", true}, {"https://www.shop.test/b", true},
			{"http://shop.test/", false}, {"http://img.shop.test/", false}, {"http://other.test/", false},
		}},
		{"domain", ScopeConfig{Kind: ScopeDomain}, []string{"www.shop.test", "news.example.co.uk"}, []check{
			{"http://www.shop.test/a", true}, {"http://shop.test/", true}, {"http://img.shop.test/x", true},
			{"http://shop2.test/", false},
			{"http://example.co.uk/", true}, {"http://other.co.uk/", false}, // co.uk is a public suffix
		}},
		{"hosts", ScopeConfig{Kind: ScopeHosts, HostList: []string{"a.test", " B.TEST "}}, []string{"seed.test"}, []check{
			{"http://a.test/", true}, {"http://b.test/x", true}, {"http://seed.test/", false},
		}},
		{"pattern", ScopeConfig{Kind: ScopePattern, Include: `^https?://[^/]*\.test/docs/`}, nil, []check{
			{"http://a.test/docs/x", true}, {"http://b.test/docs/", true}, {"http://a.test/blog/", false},
		}},
		{"host with include and exclude", ScopeConfig{Include: `/blog/`, Exclude: `\?print=`}, []string{"a.test"}, []check{
			{"http://a.test/blog/1", true}, {"http://a.test/blog/1?print=1", false}, {"http://a.test/shop/", false},
			{"http://b.test/blog/1", false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewScope(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, seed := range tc.seeds {
				s.AddSeed(seed)
			}
			for _, c := range tc.checks {
				u, d, err := CanonicalString(c.url)
				if err != nil {
					t.Fatal(err)
				}
				if got := s.Allows(u, d); got != c.want {
					t.Errorf("%s: Allows = %v, want %v (scope %s)", c.url, got, c.want, s)
				}
			}
		})
	}
}

func TestScopeRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		cfg   ScopeConfig
		field string
	}{
		{ScopeConfig{Kind: "site"}, "scope"},
		{ScopeConfig{Kind: ScopeHosts}, "scope_host_list"},
		{ScopeConfig{Kind: ScopeHost, HostList: []string{"a.test"}}, "scope_host_list"},
		{ScopeConfig{Kind: ScopeHosts, HostList: []string{"a b"}}, "scope_host_list"},
		{ScopeConfig{Kind: ScopePattern}, "scope_include"},
		{ScopeConfig{Include: "("}, "scope_include"},
		{ScopeConfig{Exclude: "[z-a]"}, "scope_exclude"},
	} {
		_, err := NewScope(tc.cfg)
		if downloader.ErrorField(err) != tc.field {
			t.Errorf("%+v: error %v, want one naming %s", tc.cfg, err, tc.field)
		}
	}
}

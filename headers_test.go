package downloader

import (
	"net/http"
	"strings"
	"testing"
)

func TestHeaderPolicyCheck(t *testing.T) {
	tests := []struct {
		name    string
		policy  HeaderPolicy
		headers map[string]string
		want    RequestHeaders
		field   string // the field an error names; "" for none
	}{
		{"none", HeaderPolicy{}, nil, nil, ""},
		{"empty", HeaderPolicy{}, map[string]string{}, nil, ""},
		{"canonical names", HeaderPolicy{}, map[string]string{"accept-language": "zh-TW,zh;q=0.9", "COOKIE": "consent=yes"},
			RequestHeaders{"Accept-Language": "zh-TW,zh;q=0.9", "Cookie": "consent=yes"}, ""},
		{"referer", HeaderPolicy{}, map[string]string{"Referer": "https://a.test/"}, RequestHeaders{"Referer": "https://a.test/"}, ""},
		{"host", HeaderPolicy{}, map[string]string{"Host": "b.test"}, nil, "request_headers.Host"},
		{"host lower case", HeaderPolicy{}, map[string]string{"host": "b.test"}, nil, "request_headers.host"},
		{"hop by hop", HeaderPolicy{}, map[string]string{"Connection": "close"}, nil, "request_headers.Connection"},
		{"transfer encoding", HeaderPolicy{}, map[string]string{"Transfer-Encoding": "chunked"}, nil, "request_headers.Transfer-Encoding"},
		{"proxy authorization", HeaderPolicy{}, map[string]string{"Proxy-Authorization": "Basic x"}, nil, "request_headers.Proxy-Authorization"},
		{"accept encoding", HeaderPolicy{}, map[string]string{"Accept-Encoding": "identity"}, nil, "request_headers.Accept-Encoding"},
		{"conditional", HeaderPolicy{}, map[string]string{"If-None-Match": `"x"`}, nil, "request_headers.If-None-Match"},
		{"not on the list", HeaderPolicy{}, map[string]string{"X-Forwarded-For": "1.2.3.4"}, nil, "request_headers.X-Forwarded-For"},
		{"user agent refused", HeaderPolicy{}, map[string]string{"User-Agent": "me"}, nil, "request_headers.User-Agent"},
		{"user agent allowed", HeaderPolicy{ShouldAllowUserAgent: true}, map[string]string{"user-agent": "me"}, RequestHeaders{"User-Agent": "me"}, ""},
		{"bad name", HeaderPolicy{}, map[string]string{"Accept Language": "en"}, nil, "request_headers.Accept Language"},
		{"empty value", HeaderPolicy{}, map[string]string{"Cookie": ""}, nil, "request_headers.Cookie"},
		{"newline in value", HeaderPolicy{}, map[string]string{"Cookie": "a=b\r\nHost: evil.test"}, nil, "request_headers.Cookie"},
		{"nul in value", HeaderPolicy{}, map[string]string{"Cookie": "a=\x00"}, nil, "request_headers.Cookie"},
		{"surrounding space", HeaderPolicy{}, map[string]string{"Cookie": " a=b"}, nil, "request_headers.Cookie"},
		{"twice", HeaderPolicy{}, map[string]string{"cookie": "a=b", "Cookie": "c=d"}, nil, "request_headers.cookie"},
		{"value too long", HeaderPolicy{}, map[string]string{"Cookie": strings.Repeat("a", MaxRequestHeaderValueBytes+1)}, nil, "request_headers.Cookie"},
		{"all too long", HeaderPolicy{}, map[string]string{"Cookie": strings.Repeat("a", 4000), "Referer": strings.Repeat("b", 4000), "Accept-Language": strings.Repeat("c", 400)},
			nil, "request_headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.policy.Check("request_headers", tt.headers)
			if f := ErrorField(err); f != tt.field {
				t.Fatalf("field = %q, want %q (err %v)", f, tt.field, err)
			}
			if err != nil {
				if ErrorCode(err) != EINVALID {
					t.Errorf("code = %s, want %s", ErrorCode(err), EINVALID)
				}
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for n, v := range tt.want {
				if got[n] != v {
					t.Errorf("%s = %q, want %q", n, got[n], v)
				}
			}
		})
	}
}

func TestParseHeaderLine(t *testing.T) {
	p := HeaderPolicy{}
	n, v, err := p.ParseHeaderLine("default_request_header", "accept-language:  ja-JP ")
	if err != nil || n != "Accept-Language" || v != "ja-JP" {
		t.Errorf("got %q %q %v", n, v, err)
	}
	for _, bad := range []string{"no colon", "Host: a.test", ": x", "Cookie:"} {
		if _, _, err := p.ParseHeaderLine("default_request_header", bad); ErrorCode(err) != EINVALID {
			t.Errorf("%q: err %v, want EINVALID", bad, err)
		}
	}
}

func TestRequestHeadersMergeAndHops(t *testing.T) {
	defaults := RequestHeaders{"Accept-Language": "en", "Cookie": "d=1"}
	got := RequestHeaders{"Cookie": "c=2"}.Merge(defaults)
	if got["Cookie"] != "c=2" || got["Accept-Language"] != "en" || len(got) != 2 {
		t.Errorf("merge = %v", got)
	}
	if defaults["Cookie"] != "d=1" {
		t.Errorf("merge changed the defaults: %v", defaults)
	}
	other := got.ForHop(false)
	if _, ok := other["Cookie"]; ok || other["Accept-Language"] != "en" {
		t.Errorf("cross-host hop = %v, want no Cookie", other)
	}
	if same := got.ForHop(true); same["Cookie"] != "c=2" {
		t.Errorf("same-host hop = %v", same)
	}
	h := http.Header{"Accept-Language": {"fr"}}
	got.SetOn(h)
	if h.Get("Accept-Language") != "en" || h.Get("Cookie") != "c=2" {
		t.Errorf("SetOn = %v", h)
	}
}

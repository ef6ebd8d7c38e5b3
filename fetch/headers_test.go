package fetch

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"downloader"
)

// TestRequestHeaders: the request's allow-listed headers reach the origin on the first
// request and on a redirect hop to the same host; a hop to another host gets them without
// Cookie (a site's cookie is for that site alone), and our own headers stay ours.
func TestRequestHeaders(t *testing.T) {
	type seen struct{ host, path, cookie, lang, referer, ua, ae string }
	var mu sync.Mutex
	var got []seen
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{hostOf(r), r.URL.Path, r.Header.Get("Cookie"), r.Header.Get("Accept-Language"),
			r.Header.Get("Referer"), r.Header.Get("User-Agent"), r.Header.Get("Accept-Encoding")})
		mu.Unlock()
		switch r.URL.Path {
		case "/start":
			w.Header().Set("Location", "/same")
			w.WriteHeader(http.StatusFound)
		case "/same":
			w.Header().Set("Location", "http://other.test/end")
			w.WriteHeader(http.StatusFound)
		default:
			io.WriteString(w, "<p>ok</p>")
		}
	})
	e := newEnv(t, o, withConfig(func(c *Config) { c.UserAgent = "ours/1" }))
	headers := downloader.RequestHeaders{"Cookie": "consent=yes", "Accept-Language": "zh-TW", "Referer": "http://ref.test/"}
	out := e.fetchOpts(context.Background(), "http://site.test/start", downloader.FetchOptions{Headers: headers})
	if out.FailReason != "" || out.HTTPStatus != 200 {
		t.Fatalf("outcome %+v", out)
	}
	want := []seen{
		{"site.test", "/start", "consent=yes", "zh-TW", "http://ref.test/", "ours/1", acceptEncoding},
		{"site.test", "/same", "consent=yes", "zh-TW", "http://ref.test/", "ours/1", acceptEncoding},
		{"other.test", "/end", "", "zh-TW", "http://ref.test/", "ours/1", acceptEncoding},
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("requests %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestRequestHeadersUserAgent: a User-Agent the operator allowed replaces ours.
func TestRequestHeadersUserAgent(t *testing.T) {
	var ua string
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		ua = r.Header.Get("User-Agent")
		io.WriteString(w, "<p>ok</p>")
	})
	e := newEnv(t, o, withConfig(func(c *Config) { c.UserAgent = "ours/1" }))
	e.fetchOpts(context.Background(), "http://site.test/", downloader.FetchOptions{Headers: downloader.RequestHeaders{"User-Agent": "theirs/2"}})
	if ua != "theirs/2" {
		t.Errorf("User-Agent %q, want theirs/2", ua)
	}
}

// TestFetchResponseHeaders: the outcome keeps the final response's header fields as served
// (for the stored page), every value of a repeated field, and nothing of a trailer, which
// arrives after the body, over HTTP/1.1 and HTTP/2 alike.
func TestFetchResponseHeaders(t *testing.T) {
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Add("X-Served", "a")
		w.Header().Add("X-Served", "b")
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, okPage)
		w.Header().Set("X-Sum", "1")
	}
	tests := []struct {
		name string
		env  func(t *testing.T) *env
		url  string
	}{
		{"http/1.1", func(t *testing.T) *env { return newEnv(t, newOrigin(t, page)) }, "http://www.plain.test/"},
		{"http/2", func(t *testing.T) *env { _, e, _ := newH2Origin(t, page); return e }, "https://www.example.com/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := tt.env(t).fetch(context.Background(), tt.url)
			if out.FailReason != "" {
				t.Fatalf("fetch failed: %s", out.FailReason)
			}
			h := http.Header(out.ResponseHeaders)
			if got := h.Values("X-Served"); strings.Join(got, ",") != "a,b" {
				t.Errorf("X-Served = %q, want a, b", got)
			}
			if got := h.Get("Content-Type"); got != "text/html" {
				t.Errorf("Content-Type = %q", got)
			}
			if got := h.Values("X-Sum"); len(got) != 0 {
				t.Errorf("the trailer X-Sum is among the header fields: %q", got)
			}
		})
	}
}

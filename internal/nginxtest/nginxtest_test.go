package nginxtest

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestStart: nginx comes up on its inherited sockets, speaks HTTP/2 over TLS under the
// test CA and HTTP/1.1 in the clear, compresses, answers 304 to its own ETag and 429 past
// its limit, and is gone after Cleanup.
func TestStart(t *testing.T) {
	s := Start(t, map[string][]byte{"page.html": []byte("<p>hello</p>"), "limited/a.html": []byte("<p>a</p>")})
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.CA.Pool()}, ForceAttemptHTTP2: true, DisableCompression: true}
	defer tr.CloseIdleConnections()
	get := func(url string, h map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	r := get("https://"+s.HTTPSAddr+"/page.html", nil)
	if r.StatusCode != 200 || r.ProtoMajor != 2 || r.Header.Get("ETag") == "" || r.Header.Get("Last-Modified") == "" {
		t.Fatalf("GET over TLS: %d %s ETag %q Last-Modified %q", r.StatusCode, r.Proto, r.Header.Get("ETag"), r.Header.Get("Last-Modified"))
	}
	if r := get("https://"+s.HTTPSAddr+"/page.html", map[string]string{"If-None-Match": r.Header.Get("ETag")}); r.StatusCode != 304 {
		t.Errorf("If-None-Match: %d, want 304", r.StatusCode)
	}
	if r := get("http://"+s.HTTPAddr+"/page.html", map[string]string{"Accept-Encoding": "gzip"}); r.ProtoMajor != 1 || r.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("plain GET with gzip: %s, Content-Encoding %q", r.Proto, r.Header.Get("Content-Encoding"))
	}
	if s.HasBrotli {
		if r := get("https://"+s.HTTPSAddr+"/page.html", map[string]string{"Accept-Encoding": "br"}); r.Header.Get("Content-Encoding") != "br" {
			t.Errorf("GET with br: Content-Encoding %q", r.Header.Get("Content-Encoding"))
		}
	} else {
		t.Log("Debian's brotli module is not installed: br not checked")
	}
	if r := get("https://"+s.HTTPSAddr+"/limited/a.html", nil); r.StatusCode != 200 {
		t.Errorf("first limited GET: %d", r.StatusCode)
	}
	if r := get("https://"+s.HTTPSAddr+"/limited/a.html", nil); r.StatusCode != 429 || r.Header.Get("Retry-After") != "30" {
		t.Errorf("second limited GET: %d Retry-After %q, want 429 and 30", r.StatusCode, r.Header.Get("Retry-After"))
	}
	// The log line is written after the answer is sent: the last one may not be there yet.
	if reqs := s.Requests(); len(reqs) < 6 || reqs[1].URI != "/page.html" || reqs[1].Protocol != "HTTP/2.0" {
		t.Errorf("access log: %+v", reqs)
	}
}

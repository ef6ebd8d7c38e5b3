package fetch

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"

	"downloader"
)

// TestConditionalRequests: a fetch given validators sends them on the URL's own request
// (If-None-Match, else If-Modified-Since) and not on a redirect hop; a 304 to it is a
// success with is_not_modified; a 2xx gives its own validators, a redirect target's none;
// a 304 nobody asked for is the origin's bad answer.
func TestConditionalRequests(t *testing.T) {
	type seen struct{ path, inm, ims string }
	var mu sync.Mutex
	var got []seen
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.URL.Path, r.Header.Get("If-None-Match"), r.Header.Get("If-Modified-Since")})
		mu.Unlock()
		switch r.URL.Path {
		case "/moved":
			w.Header().Set("ETag", `"moved"`)
			http.Redirect(w, r, "/page", http.StatusFound)
			return
		case "/unasked":
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if r.Header.Get("If-None-Match") == `"v1"` || r.Header.Get("If-Modified-Since") == "Tue, 01 Dec 2026 10:00:00 GMT" {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Last-Modified", "Tue, 01 Dec 2026 10:00:00 GMT")
		io.WriteString(w, "<p>page</p>")
	})
	e := newEnv(t, o)
	fetch := func(raw string, v downloader.Validators) *downloader.Outcome {
		t.Helper()
		return e.fetchOpts(context.Background(), raw, downloader.FetchOptions{Conditional: v})
	}
	last := func() seen {
		mu.Lock()
		defer mu.Unlock()
		return got[len(got)-1]
	}

	out := fetch("http://site.test/page", downloader.Validators{})
	want := downloader.Validators{Etag: `"v1"`, LastModified: "Tue, 01 Dec 2026 10:00:00 GMT"}
	if out.FailReason != "" || out.HTTPStatus != 200 || out.Validators != want || out.HealthSignal.IsNotModified {
		t.Fatalf("unconditional fetch: %+v", out)
	}
	if s := last(); s.inm != "" || s.ims != "" {
		t.Errorf("an unconditional fetch sent %+v", s)
	}

	for _, v := range []downloader.Validators{want, {LastModified: want.LastModified}} {
		out = fetch("http://site.test/page", v)
		if out.FailReason != "" || out.HTTPStatus != 304 || !out.HealthSignal.IsNotModified || len(out.Body) != 0 {
			t.Errorf("conditional fetch with %+v: %+v, want a 304 success, not modified", v, out)
		}
		if s := out.Summary("site.test"); !s.HasReachedOrigin || s.FailReason != nil || *s.HTTPStatus != 304 {
			t.Errorf("summary %+v", s)
		}
		s := last()
		if v.Etag != "" && (s.inm != v.Etag || s.ims != "") {
			t.Errorf("sent %+v, want If-None-Match alone (RFC 9110 §13.1.3)", s)
		}
		if v.Etag == "" && s.ims != v.LastModified {
			t.Errorf("sent %+v, want If-Modified-Since", s)
		}
	}

	out = fetch("http://site.test/moved", downloader.Validators{Etag: `"v1"`})
	mu.Lock()
	hop := got[len(got)-1]
	mu.Unlock()
	if out.HTTPStatus != 200 || out.HealthSignal.IsNotModified || !out.Validators.IsZero() || hop.path != "/page" || hop.inm != "" {
		t.Errorf("redirected conditional fetch: %+v, hop sent %+v; want the hop unconditional and no validators kept", out, hop)
	}

	out = fetch("http://site.test/unasked", downloader.Validators{})
	if out.FailReason != downloader.FailHTTPStatusError || out.HTTPStatus != 304 || out.HealthSignal.IsNotModified {
		t.Errorf("a 304 to an unconditional request: %+v, want http_status_error", out)
	}
}

package fetch

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"

	"downloader"
)

// TestHostHeaderIsTheCanonicalHost: at a real origin, the Host header of a request for a
// Unicode, full-width, upper-case, percent-encoded or IPv4-number host spelling is the
// canonical host (SPEC §2), the one the limiter keys and --connect-to matched, and so is
// a redirect hop's whose Location is written in full-width letters and an ideographic dot.
func TestHostHeaderIsTheCanonicalHost(t *testing.T) {
	var mu sync.Mutex
	var hosts []string
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
		if r.URL.Path == "/redir" {
			w.Header().Set("Location", "http://ＲＥＤＩＲ。Test/done")
			w.WriteHeader(http.StatusFound)
			return
		}
		w.Write([]byte("ok"))
	})
	// Port 80 of every name under .test and of 11.22.33.44 goes to the origin, so the
	// Host header carries no port.
	e := newEnv(t, nil, withRule("*.test:80:127.0.0.1:"+o.port), withRule("11.22.33.44:80:127.0.0.1:"+o.port))
	tests := []struct {
		raw       string
		wantHosts []string
	}{
		{"http://ｓｉｔｅ.test/", []string{"site.test"}},
		{"http://BÜCHER.test/", []string{"xn--bcher-kva.test"}},
		{"http://EXAMPLE.Test./", []string{"example.test"}},
		{"http://%73ite%2Etest/", []string{"site.test"}},
		{"http://例子．ｔｅｓｔ/", []string{"xn--fsqu00a.test"}},
		{"http://0x0b16212c/", []string{"11.22.33.44"}},
		{"http://013.026.041.054/", []string{"11.22.33.44"}},
		{"http://11.22.8492/", []string{"11.22.33.44"}},
		{"http://ｓｉｔｅ.test/redir", []string{"site.test", "redir.test"}},
	}
	for _, tt := range tests {
		mu.Lock()
		hosts = nil
		mu.Unlock()
		u, domain, err := downloader.ParseTargetURL("url", tt.raw)
		if err != nil {
			t.Fatalf("%s: %v", tt.raw, err)
		}
		adm, err := e.l.Wait(context.Background(), domain, 0, downloader.IntervalSourceRequest, downloader.EntryProbe)
		if err != nil {
			t.Fatal(err)
		}
		out := e.f.Fetch(context.Background(), u, &adm, e.hops)
		adm.Cancel()
		if out.FailReason != "" || out.HTTPStatus != 200 {
			t.Errorf("%s: fail_reason=%s http_status=%d", tt.raw, out.FailReason, out.HTTPStatus)
		}
		mu.Lock()
		got := slices.Clone(hosts)
		mu.Unlock()
		if !slices.Equal(got, tt.wantHosts) || domain != tt.wantHosts[0] {
			t.Errorf("%s: key %q, Host headers %q; want %q", tt.raw, domain, got, tt.wantHosts)
		}
	}
	if got := e.hops.admitted(); !slices.Equal(got, []string{"redir.test"}) {
		t.Errorf("hops admitted: %q, want the redirect's canonical host only", got)
	}

	// A URL handed to the fetcher as net/url parsed it, not through ParseTargetURL, is
	// still sent with its canonical host.
	mu.Lock()
	hosts = nil
	mu.Unlock()
	u, err := url.Parse("http://ＳＩＴＥ.test/")
	if err != nil {
		t.Fatal(err)
	}
	if out := e.f.Fetch(context.Background(), u, nil, nil); out.HTTPStatus != 200 {
		t.Errorf("%s: fail_reason=%s http_status=%d", u, out.FailReason, out.HTTPStatus)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(hosts, []string{"site.test"}) {
		t.Errorf("a URL parsed by net/url went out with Host %q, want [site.test]", hosts)
	}
}

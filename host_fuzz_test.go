package downloader_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"downloader"
	"downloader/netguard"
)

// FuzzCanonicalHost checks SPEC §2's one host: for any URL the service accepts, the limiter
// key (ParseTargetURL's domain), the host the SSRF guard dials or resolves, the Host header
// net/http writes and the TLS server name it sends are one and the same canonical host,
// and CanonicalHost is idempotent on it. Nothing leaves the process: the guard's dialler
// records the address and answers with an in-memory pipe, the resolver answers from
// memory. Its seeds (the spellings the differential test found both parsers accept, and
// more) run in every go test.
func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{
		"http://11.22.33.44/", "http://0x0b16212c/", "http://185999660/", "http://013.026.041.054/",
		"http://11.22.8492/", "http://0xb.0x16.0x21.0x2c/", "https://１１．２２．３３．４４/", "http://ｓｉｔｅ.test/",
		"http://BÜCHER.test/", "https://BÜCHER.test:8443/x", "http://a。b．c｡test/", "http://%41.test/",
		"https://Example.COM.:443/", "http://[::FFFF:1.2.3.4]:8080/", "https://[2001:DB8:0:0:0:0:0:1]/", "http://faß.de/",
		"http://例子.测试/", "http://xn--.test/", "http://a..b/", "http://_dmarc.example/", "https://r3---sn-abc.test/",
		"http://11.22.33.44.:080/", "http://%E4%BE%8B.test/",
	} {
		f.Add(s)
	}
	for _, s := range newSpellingGenerator(7).spellings(40) {
		f.Add(s.url)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, key, err := downloader.ParseTargetURL("url", raw)
		if err != nil {
			return
		}
		if again, err := downloader.CanonicalHost(key); err != nil || again != key {
			t.Fatalf("%q: key %q is not a fixed point: %q, %v", raw, key, again, err)
		}
		if u.Hostname() != key {
			t.Fatalf("%q: the URL passed on has host %q, the key is %q", raw, u.Hostname(), key)
		}
		if h, err := downloader.CanonicalHost(u.Host); err != nil || h != key {
			t.Fatalf("%q: the URL's host %q canonicalises to %q, %v; key %q", raw, u.Host, h, err, key)
		}
		if _, d, err := downloader.ParseTargetURL("url", u.String()); err != nil || d != key {
			t.Fatalf("%q → %q: key %q, %v; want %q", raw, u.String(), d, err, key)
		}
		w := sendThroughGuard(t, u.String())
		if w.dialHost != key && w.resolvedHost != key {
			t.Fatalf("%q: key %q, but the guard dialled %q (resolved %q)", raw, key, w.dialHost, w.resolvedHost)
		}
		hostHeader := key
		if strings.Contains(key, ":") {
			hostHeader = "[" + key + "]"
		}
		if p := u.Port(); p != "" {
			hostHeader += ":" + p
		}
		if w.hostHeader != hostHeader {
			t.Fatalf("%q: key %q, but the request went out with Host: %q (want %q)", raw, key, w.hostHeader, hostHeader)
		}
		if u.Scheme == "https" {
			// A TLS client names no IP address in SNI (RFC 6066 §3).
			want := key
			if _, err := netip.ParseAddr(key); err == nil {
				want = ""
			}
			if w.serverName != want {
				t.Fatalf("%q: key %q, but TLS named %q", raw, key, w.serverName)
			}
		}
	})
}

// wireView is what sendThroughGuard saw of one request.
type wireView struct {
	dialHost     string // the host of the address the guard dialled
	resolvedHost string // the name the guard asked its resolver for ("" for an IP)
	hostHeader   string
	serverName   string // the TLS ClientHello's SNI
}

// recordingResolver answers every name with one public-looking address, from memory.
type recordingResolver struct {
	mu    sync.Mutex
	asked string
}

func (r *recordingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	r.asked = host
	r.mu.Unlock()
	return []netip.Addr{netip.MustParseAddr("11.22.33.44")}, nil
}

// pipeDialer records the address it is asked for and answers with an in-memory pipe whose
// far end serve reads.
type pipeDialer struct {
	mu      sync.Mutex
	address string
	serve   func(net.Conn)
	wg      sync.WaitGroup
}

func (d *pipeDialer) DialContext(_ context.Context, _, address string) (net.Conn, error) {
	d.mu.Lock()
	d.address = address
	d.mu.Unlock()
	near, far := net.Pipe()
	d.wg.Go(func() { d.serve(far) })
	return near, nil
}

var errSeen = errors.New("seen")

// sendThroughGuard sends GET rawURL with net/http through a netguard.Guard whose dialler
// is a pipe, and reports the address dialled, the Host header and the TLS server name.
// No packet leaves the process.
func sendThroughGuard(t *testing.T, rawURL string) wireView {
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatalf("%q: NewRequest: %v", rawURL, err)
	}
	var v wireView
	var mu sync.Mutex
	d := &pipeDialer{serve: func(c net.Conn) {
		defer c.Close()
		if strings.HasPrefix(rawURL, "https:") {
			srv := tls.Server(c, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
				mu.Lock()
				v.serverName = h.ServerName
				mu.Unlock()
				return nil, errSeen
			}})
			_ = srv.Handshake()
			return
		}
		// The header block as written, read by hand: a request line net/http writes but
		// would not read back (a raw space in the query) still has its Host line.
		host := readHostLine(bufio.NewReader(c))
		mu.Lock()
		v.hostHeader = host
		mu.Unlock()
	}}
	res := &recordingResolver{}
	g := netguard.New(netguard.Config{Resolver: res, Dialer: d})
	if g.CheckURLHost(req.URL.Host) != nil {
		// A forbidden address (loopback, private, ...): the guard would refuse it, so
		// the dial is looked at with the guard off, which dials the host as it is.
		g = netguard.New(netguard.Config{Resolver: res, Dialer: d, AllowPrivateNetworks: true})
	}
	tr := &http.Transport{DialContext: g.DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	if resp, err := tr.RoundTrip(req); err == nil {
		resp.Body.Close()
	}
	d.wg.Wait()
	if strings.HasPrefix(rawURL, "https:") {
		// The Host header travels inside TLS: read it as net/http writes it.
		var buf bytes.Buffer
		if err := req.Write(&buf); err != nil {
			t.Fatalf("%q: write request: %v", rawURL, err)
		}
		v.hostHeader = readHostLine(bufio.NewReader(&buf))
	}
	if h, _, err := net.SplitHostPort(d.address); err == nil {
		v.dialHost = h
	}
	res.mu.Lock()
	v.resolvedHost = res.asked
	res.mu.Unlock()
	return v
}

// readHostLine reads an HTTP/1.1 header block and returns its Host field.
func readHostLine(r *bufio.Reader) string {
	host := ""
	for {
		line, err := r.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if v, ok := strings.CutPrefix(line, "Host: "); ok {
			host = v
		}
		if err != nil || line == "" {
			return host
		}
	}
}

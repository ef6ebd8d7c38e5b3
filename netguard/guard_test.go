package netguard

import (
	"context"
	"downloader/internal/testkit"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"downloader"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseConnectTo(t *testing.T) {
	tests := []struct {
		in      string
		want    Rule
		wantErr bool
	}{
		{"a.test:80:127.0.0.1:8080", Rule{"a.test", "80", "127.0.0.1", "8080"}, false},
		{"::127.0.0.1:8080", Rule{"", "", "127.0.0.1", "8080"}, false},
		{"*:443:localhost:", Rule{"", "443", "localhost", ""}, false},
		{"*.Example.COM.::[::1]:9000", Rule{"*.example.com", "", "::1", "9000"}, false},
		{"[2001:db8::1]:443:[::1]:8443", Rule{"2001:db8::1", "443", "::1", "8443"}, false},
		{"[::ffff:127.0.0.1]:80::", Rule{}, true}, // an IPv4-mapped address: write the IPv4 address
		{"bücher.de:080:127.0.0.1:1", Rule{"xn--bcher-kva.de", "80", "127.0.0.1", "1"}, false},
		{":::", Rule{}, false},
		{"", Rule{}, true},
		{"a:1:b", Rule{}, true},
		{"a:1:b:2:3", Rule{}, true},
		{"a:0:b:1", Rule{}, true},
		{"a:65536:b:1", Rule{}, true},
		{"a:+1:b:1", Rule{}, true},
		{"a:x:b:1", Rule{}, true},
		{"[::1:80:b:1", Rule{}, true},
		{"[zz]:80:b:1", Rule{}, true},
		{"[127.0.0.1]:80:b:1", Rule{}, true},
		{"a b:80:b:1", Rule{}, true},
		{"a/b:80:b:1", Rule{}, true},
		{"a:80:*.b:1", Rule{}, true},
		{"*.127.0.0.1:80:b:1", Rule{}, true},
		{"a..b:80:c:1", Rule{}, true},
	}
	for _, tt := range tests {
		got, err := ParseConnectTo(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseConnectTo(%q) err = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && got != tt.want {
			t.Errorf("ParseConnectTo(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func FuzzParseConnectTo(f *testing.F) {
	for _, s := range []string{
		"a.test:80:127.0.0.1:8080", "::127.0.0.1:8080", "*.x.y::[::1]:1", "[::1]:1:[::2]:2",
		":::", "*:443:localhost:", "[", "]:::", "a:1:b:2:3", "bücher.de:1:a:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseConnectTo(s)
		if err != nil {
			return
		}
		// The canonical form parses back to the same rule.
		r2, err := ParseConnectTo(r.String())
		if err != nil {
			t.Fatalf("ParseConnectTo(%q) ok as %+v, but its String %q fails: %v", s, r, r.String(), err)
		}
		if r2 != r {
			t.Fatalf("round trip of %q: %+v then %+v", s, r, r2)
		}
		// Mapping never panics and keeps a joinable address.
		g := New(Config{ConnectTo: []Rule{r}})
		if target, ok := g.Map("a.test", "80"); ok {
			if _, _, err := net.SplitHostPort(target); err != nil {
				t.Fatalf("rule %+v maps to a bad address %q: %v", r, target, err)
			}
		}
	})
}

func mustRules(t testing.TB, specs ...string) []Rule {
	t.Helper()
	var rules []Rule
	for _, s := range specs {
		r, err := ParseConnectTo(s)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	return rules
}

func TestMap(t *testing.T) {
	g := New(Config{ConnectTo: mustRules(t,
		"exact.test:443:127.0.0.1:8443",
		"*.wild.test::127.0.0.2:",
		"[::1]:80:localhost:8080",
		"::127.0.0.9:9",
	)})
	tests := []struct {
		host, port string
		want       string
	}{
		{"exact.test", "443", "127.0.0.1:8443"},
		{"EXACT.test.", "443", "127.0.0.1:8443"},
		{"exact.test", "80", "127.0.0.9:9"}, // falls to the catch-all
		{"a.wild.test", "80", "127.0.0.2:80"},
		{"a.b.wild.test", "8080", "127.0.0.2:8080"},
		{"wild.test", "80", "127.0.0.9:9"}, // "*." needs a subdomain
		{"[::1]", "80", "localhost:8080"},
		{"::1", "80", "localhost:8080"},
		{"other.test", "1", "127.0.0.9:9"},
	}
	for _, tt := range tests {
		got, ok := g.Map(tt.host, tt.port)
		if !ok || got != tt.want {
			t.Errorf("Map(%q, %q) = %q, %v; want %q", tt.host, tt.port, got, ok, tt.want)
		}
	}
	g = New(Config{ConnectTo: mustRules(t, "a.test:80:127.0.0.1:1", "*.b.test::[::1]:")})
	for _, hp := range [][2]string{{"a.test", "81"}, {"b.test", "80"}, {"aa.test", "80"}} {
		if got, ok := g.Map(hp[0], hp[1]); ok {
			t.Errorf("Map(%q, %q) = %q, want no match", hp[0], hp[1], got)
		}
	}
	if got, _ := g.Map("x.b.test", "443"); got != "[::1]:443" {
		t.Errorf("IPv6 target = %q, want [::1]:443", got)
	}
}

func TestCheckURLHost(t *testing.T) {
	g := New(Config{ConnectTo: mustRules(t, "127.0.0.2:8080:127.0.0.1:1", "*.mapped.test::127.0.0.1:1")})
	tests := []struct {
		host    string
		wantErr bool
	}{
		{"example.com", false},
		{"example.com:8080", false},
		{"93.184.215.14", false},
		{"[2606:4700::1]", false},
		{"[2606:4700::1]:443", false},
		{"127.0.0.1", true},
		{"127.0.0.1:8080", true},
		{"localhost", true},
		{"LOCALHOST.", true},
		{"api.localhost", true},
		{"[::1]", true},
		{"::1", true},
		{"[::ffff:127.0.0.1]", true},
		{"[::ffff:7f00:1]:80", true},
		{"[0:0:0:0:0:ffff:127.0.0.1]", true},
		{"2130706433", true},
		{"0x7f.1", true},
		{"0177.0.0.1", true},
		{"127.1", true},
		{"0", true},
		{"169.254.169.254", true},
		{"0xa9.0xfe.0xa9.0xfe", true},
		{"2852039166", true}, // 169.254.169.254
		{"10.1.2.3", true},
		{"[fe80::1%25eth0]", true},
		{"[fe80::1%eth0]", true},
		{"[fd00:ec2::254]", true},
		{"999.1.1.1", true},  // ends in a number, not an address: a browser refuses it
		{"127.0.0.2", false}, // mapped by a rule: the operator's choice
		{"x.mapped.test", false},
		{"", true},
		// IDNA-mapped forms: what a browser or net/http dials is the mapped host.
		{"①②⑦.⓪.⓪.①", true},
		{"127。0。0。1", true},
		{"１２７.０.０.１:80", true},
		{"①②⑦。①", true},
		{"0x7f。1", true},
		{"⑩.①.②.③", true},
		{"ｌｏｃａｌｈｏｓｔ", true},
		{"⑨③.①⑧④.②①⑤.①④", false}, // 93.184.215.14, public
		{"ｅｘａｍｐｌｅ.com", false},
		{"bücher.example", false},
	}
	for _, tt := range tests {
		err := g.CheckURLHost(tt.host)
		if (err != nil) != tt.wantErr {
			t.Errorf("CheckURLHost(%q) = %v, want error %v", tt.host, err, tt.wantErr)
			continue
		}
		if err != nil && (downloader.ErrorCode(err) != downloader.EINVALID || downloader.ErrorField(err) != "url") {
			t.Errorf("CheckURLHost(%q) = %v, want an EINVALID error on field url", tt.host, err)
		}
	}
	open := New(Config{AllowPrivateNetworks: true})
	for _, h := range []string{"127.0.0.1", "localhost", "2130706433", "[::1]"} {
		if err := open.CheckURLHost(h); err != nil {
			t.Errorf("with private networks allowed, CheckURLHost(%q) = %v", h, err)
		}
	}
}

// checkDialer really dials loopback only. A dial to a "pretend public" address returns
// one end of an in-memory pipe (no packet leaves the process); anything else fails the
// test: the guard must never have let it through.
type checkDialer struct {
	t       testing.TB
	public  map[string]bool
	mu      sync.Mutex
	dialled []string
}

func (d *checkDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialled = append(d.dialled, address)
	d.mu.Unlock()
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		d.t.Errorf("dial of a bad address %q", address)
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
		var nd net.Dialer
		return nd.DialContext(ctx, network, address)
	}
	if d.public[address] {
		c1, c2 := net.Pipe()
		c2.Close()
		return c1, nil
	}
	d.t.Errorf("the guard let through a dial to %s %s", network, address)
	return nil, errors.New("test dialer: refused " + address)
}

func (d *checkDialer) addresses() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialled...)
}

// loopbackServer accepts connections on 127.0.0.1 and answers "hi" on each.
func loopbackServer(t *testing.T) (addr string, accepts func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			io.WriteString(c, "hi")
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestDialContext(t *testing.T) {
	origin, accepts := loopbackServer(t)
	_, originPort, _ := net.SplitHostPort(origin)

	res := &testkit.Resolver{
		Answers: map[string][]netip.Addr{
			"public.test":    {netip.MustParseAddr("93.184.215.14")},
			"public6.test":   {netip.MustParseAddr("2606:4700::1")},
			"mixed.test":     {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("10.0.0.1")},
			"rebind.test":    {netip.MustParseAddr("127.0.0.1")},
			"meta.test":      {netip.MustParseAddr("169.254.169.254")},
			"mapped6.test":   {netip.MustParseAddr("::ffff:127.0.0.1")},
			"private6.test":  {netip.MustParseAddr("fd00::1")},
			"linklocal.test": {netip.MustParseAddr("fe80::1")},
			"nat64.test":     {netip.MustParseAddr("64:ff9b::a9fe:a9fe")},
			"empty.test":     {},
		},
		Errs: map[string]error{
			"servfail.test": &net.DNSError{Err: "server misbehaving", Name: "servfail.test", IsTemporary: true},
			"timeout.test":  &net.DNSError{Err: "i/o timeout", Name: "timeout.test", IsTimeout: true},
			"weird.test":    errors.New("resolver exploded"),
		},
	}
	dialer := &checkDialer{t: t, public: map[string]bool{"93.184.215.14:80": true, "[2606:4700::1]:80": true}}
	g := New(Config{
		Resolver: res,
		Dialer:   dialer,
		ConnectTo: mustRules(t,
			"mapped.test:80:127.0.0.1:"+originPort,
			"*.vhost.test::"+origin[:strings.LastIndexByte(origin, ':')]+":"+originPort,
		),
	})
	ctx := context.Background()

	type want int
	const (
		wantOK want = iota
		wantForbidden
		wantNotFound
		wantResolverFailure
	)
	tests := []struct {
		address string
		want    want
	}{
		{"public.test:80", wantOK},
		{"public6.test:80", wantOK},
		{"93.184.215.14:80", wantOK},
		{"mapped.test:80", wantOK},
		{"a.vhost.test:443", wantOK},
		{"mixed.test:80", wantForbidden},
		{"rebind.test:80", wantForbidden},
		{"meta.test:80", wantForbidden},
		{"mapped6.test:80", wantForbidden},
		{"private6.test:80", wantForbidden},
		{"linklocal.test:80", wantForbidden},
		{"nat64.test:80", wantForbidden},
		{"localhost:80", wantForbidden},
		{"x.localhost:80", wantForbidden},
		{"127.0.0.1:" + originPort, wantForbidden},
		{"[::1]:80", wantForbidden},
		{"[::ffff:127.0.0.1]:80", wantForbidden},
		{"2130706433:" + originPort, wantForbidden},
		{"0x7f.1:" + originPort, wantForbidden},
		{"169.254.169.254:80", wantForbidden},
		{"10.0.0.1:80", wantForbidden},
		{"mapped.test:81", wantNotFound}, // port does not match the rule: resolved, NXDOMAIN
		{"nx.test:80", wantNotFound},
		{"empty.test:80", wantNotFound},
		{"servfail.test:80", wantResolverFailure},
		{"timeout.test:80", wantResolverFailure},
		{"weird.test:80", wantResolverFailure},
	}
	for _, tt := range tests {
		c, err := g.DialContext(ctx, "tcp", tt.address)
		if c != nil {
			io.ReadAll(c) // a loopback origin says "hi" once it has counted the accept
			c.Close()
		}
		var fe *ForbiddenError
		var de *net.DNSError
		switch tt.want {
		case wantOK:
			if err != nil {
				t.Errorf("DialContext(%s) = %v, want a connection", tt.address, err)
			}
		case wantForbidden:
			if !errors.As(err, &fe) {
				t.Errorf("DialContext(%s) = %v, want a *ForbiddenError", tt.address, err)
			}
		case wantNotFound:
			if !errors.As(err, &de) || !de.IsNotFound {
				t.Errorf("DialContext(%s) = %v, want a not-found *net.DNSError", tt.address, err)
			}
		case wantResolverFailure:
			if !errors.As(err, &de) || de.IsNotFound {
				t.Errorf("DialContext(%s) = %v, want a *net.DNSError that is not IsNotFound", tt.address, err)
			}
		}
	}
	if n := accepts(); n != 2 {
		t.Errorf("the loopback origin accepted %d connections, want 2 (the two connect-to dials)", n)
	}
	// Names are resolved once per dial and literals never.
	if n := res.Count("rebind.test"); n != 1 {
		t.Errorf("rebind.test resolved %d times, want 1", n)
	}
	for _, h := range []string{"localhost", "127.0.0.1", "2130706433", "mapped.test"} {
		if n := res.Count(h); n != 0 && h != "mapped.test" {
			t.Errorf("%s was resolved %d times, want 0", h, n)
		}
	}
	// The checked address itself is dialled, never the name.
	for _, a := range dialer.addresses() {
		host, _, _ := net.SplitHostPort(a)
		if _, err := netip.ParseAddr(host); err != nil {
			t.Errorf("dialled a name %q: the guard must dial the checked address", a)
		}
	}
}

func TestDialContextAllowPrivate(t *testing.T) {
	origin, accepts := loopbackServer(t)
	g := New(Config{AllowPrivateNetworks: true, Dialer: &checkDialer{t: t}})
	c, err := g.DialContext(context.Background(), "tcp", origin)
	if err != nil {
		t.Fatalf("DialContext(%s) with private networks allowed: %v", origin, err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "hi" || accepts() != 1 {
		t.Errorf("read %q with %d accepts, want hi and 1", b, accepts())
	}
}

func TestDialContextFamilies(t *testing.T) {
	res := &testkit.Resolver{Answers: map[string][]netip.Addr{
		"dual.test": {netip.MustParseAddr("2606:4700::1"), netip.MustParseAddr("93.184.215.14")},
	}}
	dialer := &checkDialer{t: t, public: map[string]bool{"93.184.215.14:80": true, "[2606:4700::1]:80": true}}
	g := New(Config{Resolver: res, Dialer: dialer})
	c, err := g.DialContext(context.Background(), "tcp4", "dual.test:80")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := dialer.addresses(); len(got) != 1 || got[0] != "93.184.215.14:80" {
		t.Errorf("tcp4 dialled %v, want only the IPv4 answer", got)
	}
}

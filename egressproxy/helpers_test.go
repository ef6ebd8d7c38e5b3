package egressproxy_test

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"downloader/egressproxy"
	"downloader/internal/proxytest"
	"downloader/internal/testkit"
	"downloader/netguard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// proxyDialer dials the proxy for real (loopback only) and counts the connections: the
// evidence that a fetch went through the proxy, or that nothing was sent to it.
type proxyDialer struct {
	t     testing.TB
	count atomic.Int64
}

func (d *proxyDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		d.t.Errorf("the egress dialer dialled %s, which is not the loopback proxy", address)
		return nil, net.UnknownNetworkError("loopback only")
	}
	d.count.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

// guardThrough is a guard whose dials go through the proxy at proxyURL. rules are
// connect-to rules; answers the test resolver's table (no system DNS).
func guardThrough(t testing.TB, proxyURL string, creds egressproxy.Credentials, rules []string, answers map[string][]netip.Addr) (*netguard.Guard, *proxyDialer) {
	t.Helper()
	pd := &proxyDialer{t: t}
	res := &testkit.Resolver{Answers: answers}
	d, err := egressproxy.New(egressproxy.Config{URL: proxyURL, Credentials: creds, Dialer: pd, Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	var rs []netguard.Rule
	for _, s := range rules {
		r, err := netguard.ParseConnectTo(s)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return netguard.New(netguard.Config{ConnectTo: rs, Resolver: res, Dialer: d}), pd
}

func mustCreds(t testing.TB, s string) egressproxy.Credentials {
	t.Helper()
	c, err := egressproxy.ParseCredentials(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// proxyKind is one real proxy of the tests.
type proxyKind struct {
	name  string
	start func(t testing.TB) (url string, creds egressproxy.Credentials)
}

const (
	testUser     = "crawler"
	testPassword = "pa55-Wd-never-logged"
)

var proxyKinds = []proxyKind{
	{"squid", func(t testing.TB) (string, egressproxy.Credentials) {
		return proxytest.Squid(t, proxytest.SquidOptions{}).URL, egressproxy.Credentials{}
	}},
	{"squid_basic_auth", func(t testing.TB) (string, egressproxy.Credentials) {
		p := proxytest.Squid(t, proxytest.SquidOptions{Username: testUser, Password: testPassword})
		return p.URL, mustCreds(t, testUser+":"+testPassword)
	}},
	{"dante_socks5", func(t testing.TB) (string, egressproxy.Credentials) {
		return proxytest.Dante(t).URL, egressproxy.Credentials{}
	}},
}

// hookCounter is a ConnectHook that counts the connection attempts the guard tells it
// of (the spent-slot moment) and their ends.
type hookCounter struct {
	mu         sync.Mutex
	connecting int
	connected  []error
}

func (h *hookCounter) Connecting(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.connecting++
	return nil
}

func (h *hookCounter) Connected(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.connected = append(h.connected, err)
}

func (h *hookCounter) counts() (connecting, connected int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.connecting, len(h.connected)
}

// closedPort is a loopback address that refuses connections (proxytest.ClosedPort).
func closedPort(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + proxytest.ClosedPort(t)
}

// Package egressproxy sends the downloader's connections to origins through an
// operator's egress proxy: HTTP CONNECT (http://HOST:PORT) or SOCKS5 (socks5://HOST:PORT,
// RFC 1928, with RFC 1929 username and password). A *Dialer is netguard's Config.Dialer
// (a netguard.TunnelDialer), so the fetcher, the renderer's proxies and robots.txt all
// dial through it behind the SSRF guard.
//
// The rules (SPEC §2, §4; docs/egress-proxy.md has the table):
//   - The guard decides on the target: it resolves and checks the name and hands the
//     dialer the address it checked. The proxy is asked for that address ("CONNECT
//     ip:port", a SOCKS5 request with the address), never for a name it could resolve to
//     a forbidden address. A name reaches the dialer only from the operator's own choice
//     (a --connect-to target, or the guard turned off); it is resolved here, and the
//     proxy still gets an address.
//   - The wire moment is the connect request the proxy acts on: netguard.Connecting is
//     called right before it is sent. The connection to the proxy and its
//     authentication come before and spend nothing.
//   - A proxy that is down or refuses us (no connection, a 407, a failed SOCKS5
//     authentication, a refusal by its rules, a broken answer) is our own egress failure:
//     *ProxyError, cause egress_proxy_failed (fail_reason egress_unavailable,
//     has_reached_origin=false). A proxy that reports it could not connect to the target
//     (CONNECT 502/503/504; SOCKS5 network or host unreachable, connection refused, TTL
//     expired) is the target's failure: *TargetError, connect_refused or connect_timeout.
//
// Credentials are never written to a log, an error or the API: Credentials formats as
// "[redacted]" in every verb.
package egressproxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"downloader"
	"downloader/netguard"
)

// Scheme is the kind of proxy.
type Scheme string

const (
	SchemeHTTP   Scheme = "http"   // HTTP CONNECT (RFC 9110 §9.3.6)
	SchemeSOCKS5 Scheme = "socks5" // SOCKS5 (RFC 1928)
)

// Credentials are the proxy's username and password. The zero value is no credentials.
// They format as "[redacted]" (fmt, slog, JSON) so that no log line or error can carry
// them.
type Credentials struct {
	// A pointer, so that even fmt's reflection over a struct that holds Credentials in an
	// unexported field (where it cannot call Format) prints an address, not the secret.
	s *secret
}

type secret struct{ username, password string }

// ParseCredentials reads "username:password" (one line; a trailing newline is dropped),
// the form of --egress-proxy-credentials-file and DOWNLOADER_EGRESS_PROXY_CREDENTIALS.
// Its errors never quote s.
func ParseCredentials(s string) (Credentials, error) {
	s = strings.TrimRight(s, "\r\n")
	user, pass, ok := strings.Cut(s, ":")
	switch {
	case !ok:
		return Credentials{}, errors.New("egress proxy credentials: want username:password")
	case user == "":
		return Credentials{}, errors.New("egress proxy credentials: the username is empty")
	case strings.ContainsAny(s, "\r\n"):
		return Credentials{}, errors.New("egress proxy credentials: want one line")
	case len(user) > 255 || len(pass) > 255:
		return Credentials{}, errors.New("egress proxy credentials: username and password are at most 255 bytes each (RFC 1929)")
	}
	return Credentials{s: &secret{username: user, password: pass}}, nil
}

// IsSet reports whether c holds credentials.
func (c Credentials) IsSet() bool { return c.s != nil }

const redacted = "[redacted]"

func (c Credentials) String() string                { return redacted }
func (c Credentials) GoString() string              { return redacted }
func (c Credentials) Format(f fmt.State, verb rune) { io.WriteString(f, redacted) }
func (c Credentials) LogValue() slog.Value          { return slog.StringValue(redacted) }
func (c Credentials) MarshalText() ([]byte, error)  { return []byte(redacted), nil }

// Config configures a Dialer.
type Config struct {
	// URL is http://HOST:PORT or socks5://HOST:PORT, without credentials, path or query.
	URL         string
	Credentials Credentials
	// Dialer connects to the proxy; default &net.Dialer{}.
	Dialer netguard.ContextDialer
	// Resolver resolves the names the operator's own choices give (see the package
	// comment); default net.DefaultResolver.
	Resolver netguard.Resolver
}

// Dialer dials addresses through the proxy. Safe for concurrent use; it holds no state
// after New.
type Dialer struct {
	scheme   Scheme
	addr     string // the proxy's host:port
	creds    Credentials
	dialer   netguard.ContextDialer
	resolver netguard.Resolver
}

var _ netguard.TunnelDialer = (*Dialer)(nil)

// ParseURL checks a proxy URL: its scheme and HOST:PORT. Credentials in it are refused
// (they would show in process listings and logs); the error never quotes them.
func ParseURL(raw string) (Scheme, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", errors.New("egress proxy: not a URL (want http://HOST:PORT or socks5://HOST:PORT)")
	}
	if u.User != nil {
		return "", "", errors.New("egress proxy: the URL must not carry credentials: give them in --egress-proxy-credentials-file or DOWNLOADER_EGRESS_PROXY_CREDENTIALS")
	}
	s := Scheme(strings.ToLower(u.Scheme))
	if s != SchemeHTTP && s != SchemeSOCKS5 {
		return "", "", fmt.Errorf("egress proxy: scheme %q: want http or socks5", u.Scheme)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", "", errors.New("egress proxy: want http://HOST:PORT or socks5://HOST:PORT, with no path or query")
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" {
		return "", "", fmt.Errorf("egress proxy: %q: want HOST:PORT", u.Host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("egress proxy: port %q: want 1 to 65535", port)
	}
	return s, u.Host, nil
}

// New returns the dialer of cfg.
func New(cfg Config) (*Dialer, error) {
	s, addr, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	d := &Dialer{scheme: s, addr: addr, creds: cfg.Credentials, dialer: cfg.Dialer, resolver: cfg.Resolver}
	if d.dialer == nil {
		d.dialer = &net.Dialer{}
	}
	if d.resolver == nil {
		d.resolver = net.DefaultResolver
	}
	return d, nil
}

// String is the proxy's URL, without credentials: what logs may say.
func (d *Dialer) String() string { return string(d.scheme) + "://" + d.addr }

// DialsThroughProxy marks d as a netguard.TunnelDialer.
func (d *Dialer) DialsThroughProxy() {}

// DialContext connects to address through the proxy. address is "ip:port" from the
// guard; a name (from a --connect-to target or with the guard off) is resolved first and
// its addresses are asked for one after the other. The errors: *ProxyError (our egress),
// *TargetError (the proxy could not connect to the target), a *net.DNSError, a
// ConnectHook's refusal, or the context's error when ctx was cancelled.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: dial %q: %w", address, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return d.dialAddr(ctx, netip.AddrPortFrom(ip.Unmap().WithZone(""), portNumber(port)))
	}
	ipNet := "ip"
	switch network {
	case "tcp4":
		ipNet = "ip4"
	case "tcp6":
		ipNet = "ip6"
	}
	addrs, err := d.resolver.LookupNetIP(ctx, ipNet, host)
	if err != nil {
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) {
			err = &net.DNSError{Err: err.Error(), Name: host, IsTemporary: true, UnwrapErr: err}
		}
		return nil, fmt.Errorf("egress proxy: resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var firstErr error
	for _, a := range addrs {
		c, err := d.dialAddr(ctx, netip.AddrPortFrom(a.Unmap(), portNumber(port)))
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		var te *TargetError
		if !errors.As(err, &te) || ctx.Err() != nil {
			break // the proxy itself failed, or the time is up: another address will not help
		}
	}
	return nil, firstErr
}

func portNumber(p string) uint16 {
	n, _ := strconv.Atoi(p)
	return uint16(n)
}

// dialAddr connects to the proxy and asks it for target.
func (d *Dialer) dialAddr(ctx context.Context, target netip.AddrPort) (net.Conn, error) {
	c, err := d.dialer.DialContext(ctx, "tcp", d.addr)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, fmt.Errorf("egress proxy %s: %w", d, ctx.Err())
		}
		return nil, &ProxyError{Proxy: d.String(), Step: "connect to the proxy", Err: err}
	}
	// The exchange with the proxy runs under the dial's deadline and ends with it.
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	var tc net.Conn
	switch d.scheme {
	case SchemeSOCKS5:
		tc, err = d.socks5(ctx, c, target)
	default:
		tc, err = d.connect(ctx, c, target)
	}
	if !stop() || err != nil {
		c.Close()
		if err == nil || errors.Is(ctx.Err(), context.Canceled) {
			return nil, fmt.Errorf("egress proxy %s: %w", d, context.Cause(ctx))
		}
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return tc, nil
}

// connecting is the wire moment: the guard's hook, right before the connect request.
func (d *Dialer) connecting(ctx context.Context, target netip.AddrPort) error {
	if err := netguard.Connecting(ctx); err != nil {
		return fmt.Errorf("egress proxy: connection to %s not attempted: %w", target, err)
	}
	return nil
}

// connect runs HTTP CONNECT on c. The answer's status decides (see the package comment).
func (d *Dialer) connect(ctx context.Context, c net.Conn, target netip.AddrPort) (net.Conn, error) {
	var b strings.Builder
	hp := target.String()
	b.WriteString("CONNECT " + hp + " HTTP/1.1\r\nHost: " + hp + "\r\n")
	if d.creds.IsSet() {
		b.WriteString("Proxy-Authorization: Basic " +
			base64.StdEncoding.EncodeToString([]byte(d.creds.s.username+":"+d.creds.s.password)) + "\r\n")
	}
	b.WriteString("\r\n")
	if err := d.connecting(ctx, target); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, d.afterRequest(ctx, "send CONNECT", target, err)
	}
	br := bufio.NewReaderSize(c, 4096)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return nil, d.afterRequest(ctx, "read the CONNECT answer", target, err)
	}
	resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		if br.Buffered() > 0 { // bytes of the target's that came with the answer
			return &bufferedConn{Conn: c, r: br}, nil
		}
		return c, nil
	case code == http.StatusBadGateway || code == http.StatusServiceUnavailable:
		return nil, &TargetError{Proxy: d.String(), Target: target.String(), Answer: resp.Status, Cause: downloader.CauseConnectRefused}
	case code == http.StatusGatewayTimeout:
		return nil, &TargetError{Proxy: d.String(), Target: target.String(), Answer: resp.Status, Cause: downloader.CauseConnectTimeout}
	default: // 407, 403 (its rules), 400, 405, 500, ...: the proxy refused us
		return nil, &ProxyError{Proxy: d.String(), Step: "CONNECT " + target.String(), Status: code, Answer: resp.Status}
	}
}

// afterRequest is the error of a proxy exchange that broke after the connect request went
// out: the dial's deadline is then the target's connect timeout (the proxy was connecting
// to it); anything else is the proxy's failure.
func (d *Dialer) afterRequest(ctx context.Context, step string, target netip.AddrPort, err error) error {
	var ne net.Error
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &TargetError{Proxy: d.String(), Target: target.String(), Answer: "no answer in time", Cause: downloader.CauseConnectTimeout}
	}
	return &ProxyError{Proxy: d.String(), Step: step, Err: err}
}

// bufferedConn reads what the CONNECT answer's reader already holds first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// ProxyError is our own egress failing: the proxy could not be reached, or it refused us
// or answered nonsense. No packet of ours reached the origin.
type ProxyError struct {
	Proxy  string // the proxy's URL, no credentials
	Step   string
	Status int    // an HTTP proxy's answer, 0 if none
	Answer string // its status line or SOCKS5 reply, "" if none
	Err    error
}

func (e *ProxyError) Error() string {
	msg := "egress proxy " + e.Proxy + ": " + e.Step
	if e.Answer != "" {
		msg += ": answered " + e.Answer
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *ProxyError) Unwrap() error { return e.Err }

// EgressCause is downloader.CauseEgressProxyFailed: fetch and render classify by it.
func (e *ProxyError) EgressCause() downloader.Cause { return downloader.CauseEgressProxyFailed }

// TargetError is the proxy's report that it could not connect to the target: the
// target's failure, as if we had dialled it ourselves.
type TargetError struct {
	Proxy  string
	Target string // ip:port
	Answer string
	Cause  downloader.Cause // connect_refused or connect_timeout
}

func (e *TargetError) Error() string {
	return "egress proxy " + e.Proxy + ": could not connect to " + e.Target + ": " + e.Answer
}

// EgressCause is the target's failure the proxy reported.
func (e *TargetError) EgressCause() downloader.Cause { return e.Cause }

// Timeout makes a connect timeout read as one to code that asks net.Error.
func (e *TargetError) Timeout() bool   { return e.Cause == downloader.CauseConnectTimeout }
func (e *TargetError) Temporary() bool { return false }

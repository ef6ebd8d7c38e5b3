package egressproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"

	"downloader"
)

// SOCKS5 (RFC 1928) with username and password (RFC 1929): only CONNECT, only to an
// address (ATYP 1 or 4), never to a name (ATYP 3).

const (
	socksVersion      = 5
	socksNoAuth       = 0x00
	socksUserPass     = 0x02
	socksNoAcceptable = 0xff
	socksCmdConnect   = 0x01
	socksATYPv4       = 0x01
	socksATYPName     = 0x03
	socksATYPv6       = 0x04
)

// socksReplies are the SOCKS5 replies (RFC 1928 §6) and the cause each tells. The proxy's
// own refusals (general failure, not allowed by its rules, command or address type not
// supported) are our egress failing; the ones that report the target's network path are
// the target's failure.
var socksReplies = map[byte]struct {
	text     string
	isTarget bool
	cause    downloader.Cause
}{
	0x01: {"general SOCKS server failure", false, downloader.CauseEgressProxyFailed},
	0x02: {"connection not allowed by ruleset", false, downloader.CauseEgressProxyFailed},
	0x03: {"network unreachable", true, downloader.CauseConnectTimeout},
	0x04: {"host unreachable", true, downloader.CauseConnectTimeout},
	0x05: {"connection refused", true, downloader.CauseConnectRefused},
	0x06: {"TTL expired", true, downloader.CauseConnectTimeout},
	0x07: {"command not supported", false, downloader.CauseEgressProxyFailed},
	0x08: {"address type not supported", false, downloader.CauseEgressProxyFailed},
}

func (d *Dialer) socks5(ctx context.Context, c net.Conn, target netip.AddrPort) (net.Conn, error) {
	fail := func(step string, err error) error { return &ProxyError{Proxy: d.String(), Step: step, Err: err} }
	greeting := []byte{socksVersion, 1, socksNoAuth}
	if d.creds.IsSet() {
		greeting = []byte{socksVersion, 1, socksUserPass} // with credentials, only them
	}
	if _, err := c.Write(greeting); err != nil {
		return nil, fail("SOCKS5 greeting", err)
	}
	var choice [2]byte
	if _, err := io.ReadFull(c, choice[:]); err != nil {
		return nil, fail("SOCKS5 greeting", err)
	}
	switch {
	case choice[0] != socksVersion:
		return nil, fail("SOCKS5 greeting", fmt.Errorf("not a SOCKS5 server (version %d)", choice[0]))
	case choice[1] == socksNoAuth && !d.creds.IsSet():
	case choice[1] == socksUserPass && d.creds.IsSet():
		if err := d.socksAuth(c); err != nil {
			return nil, err
		}
	case choice[1] == socksNoAcceptable:
		return nil, &ProxyError{Proxy: d.String(), Step: "SOCKS5 greeting", Answer: "no acceptable authentication method"}
	default:
		return nil, fail("SOCKS5 greeting", fmt.Errorf("the server chose method %#x, which we did not offer", choice[1]))
	}

	req := []byte{socksVersion, socksCmdConnect, 0}
	if a := target.Addr(); a.Is4() {
		b := a.As4()
		req = append(append(req, socksATYPv4), b[:]...)
	} else {
		b := a.As16()
		req = append(append(req, socksATYPv6), b[:]...)
	}
	req = append(req, byte(target.Port()>>8), byte(target.Port()))
	if err := d.connecting(ctx, target); err != nil {
		return nil, err
	}
	if _, err := c.Write(req); err != nil {
		return nil, d.afterRequest(ctx, "send the SOCKS5 request", target, err)
	}
	var head [4]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return nil, d.afterRequest(ctx, "read the SOCKS5 reply", target, err)
	}
	if head[0] != socksVersion {
		return nil, fail("SOCKS5 reply", fmt.Errorf("version %d", head[0]))
	}
	if rep := head[1]; rep != 0 {
		r, ok := socksReplies[rep]
		if !ok {
			r.text, r.cause = fmt.Sprintf("reply %#x", rep), downloader.CauseEgressProxyFailed
		}
		answer := fmt.Sprintf("%s (%d)", r.text, rep)
		if r.isTarget {
			return nil, &TargetError{Proxy: d.String(), Target: target.String(), Answer: answer, Cause: r.cause}
		}
		return nil, &ProxyError{Proxy: d.String(), Step: "SOCKS5 connect to " + target.String(), Answer: answer}
	}
	// The bound address: read and dropped.
	var n int
	switch head[3] {
	case socksATYPv4:
		n = 4 + 2
	case socksATYPv6:
		n = 16 + 2
	case socksATYPName:
		var l [1]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return nil, fail("SOCKS5 reply", err)
		}
		n = int(l[0]) + 2
	default:
		return nil, fail("SOCKS5 reply", fmt.Errorf("address type %d", head[3]))
	}
	if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
		return nil, fail("SOCKS5 reply", err)
	}
	return c, nil
}

// socksAuth runs RFC 1929's username and password exchange.
func (d *Dialer) socksAuth(c net.Conn) error {
	u, p := d.creds.s.username, d.creds.s.password
	msg := make([]byte, 0, 3+len(u)+len(p))
	msg = append(msg, 1, byte(len(u)))
	msg = append(msg, u...)
	msg = append(msg, byte(len(p)))
	msg = append(msg, p...)
	if _, err := c.Write(msg); err != nil {
		return &ProxyError{Proxy: d.String(), Step: "SOCKS5 authentication", Err: err}
	}
	var reply [2]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		return &ProxyError{Proxy: d.String(), Step: "SOCKS5 authentication", Err: err}
	}
	if reply[1] != 0 {
		return &ProxyError{Proxy: d.String(), Step: "SOCKS5 authentication", Answer: "credentials refused",
			Err: errors.New("the proxy refused our username and password")}
	}
	return nil
}

// Package netguard is the downloader's SSRF guard: the one place that decides which
// addresses a fetch or a render may connect to. It is used by the plain fetcher (as its
// transport's DialContext) and by the headless renderer (to vet the URLs a page asks for).
//
// The policy (SPEC §2, §4):
//   - An address that an origin points us to, through DNS or a redirect, is refused when
//     Forbidden says so (loopback, private, link-local, CGNAT, metadata, ...): the fetch
//     fails with destination_forbidden.
//   - A URL that names such an address directly, as an IP literal in any of the forms a
//     browser accepts (2130706433, 0x7f.1, [::ffff:127.0.0.1]) or as "localhost", is the
//     caller's mistake: CheckURLHost returns an EINVALID error (HTTP 400).
//   - A --connect-to rule is the operator's choice: its target is always allowed.
//   - Config.AllowPrivateNetworks turns the guard off.
//
// A host is resolved once and the checked address itself is dialled, so a DNS answer
// that changes between the check and the dial (DNS rebinding) cannot slip through.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"downloader"
)

// Resolver is satisfied by *net.Resolver.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ContextDialer is satisfied by *net.Dialer.
type ContextDialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config configures a Guard. The zero value is a guard with no rules, the system resolver
// and a plain dialer.
type Config struct {
	ConnectTo            []Rule
	AllowPrivateNetworks bool          // --allow-private-networks turns the guard off
	Resolver             Resolver      // default net.DefaultResolver
	Dialer               ContextDialer // default &net.Dialer{}
}

// Guard dials on behalf of fetches and renders. It is safe for concurrent use and holds
// no mutable state after New.
type Guard struct {
	rules        []Rule
	allowPrivate bool
	resolver     Resolver
	dialer       ContextDialer
}

// New returns a guard for cfg.
func New(cfg Config) *Guard {
	g := &Guard{
		rules:        append([]Rule(nil), cfg.ConnectTo...),
		allowPrivate: cfg.AllowPrivateNetworks,
		resolver:     cfg.Resolver,
		dialer:       cfg.Dialer,
	}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	if g.dialer == nil {
		g.dialer = &net.Dialer{}
	}
	return g
}

// ForbiddenError is returned by DialContext when the destination is an address the guard
// refuses. Addr is the zero Addr when the host is refused by name ("localhost").
type ForbiddenError struct {
	Host   string
	Addr   netip.Addr
	Reason string
}

func (e *ForbiddenError) Error() string {
	if !e.Addr.IsValid() || e.Host == e.Addr.String() {
		return fmt.Sprintf("netguard: destination %s is forbidden (%s)", e.Host, e.Reason)
	}
	return fmt.Sprintf("netguard: destination %s resolves to %s, which is forbidden (%s)", e.Host, e.Addr, e.Reason)
}

// Map returns the connect-to target for host:port if a rule matches (the first one wins).
// host is read in its canonical form (downloader.CanonicalHost); a host that has none
// matches no rule.
func (g *Guard) Map(host, port string) (target string, ok bool) {
	h, err := downloader.CanonicalHost(host)
	if err != nil {
		return "", false
	}
	return g.mapCanonical(h, port)
}

// mapCanonical is Map for a host already canonical.
func (g *Guard) mapCanonical(h, port string) (target string, ok bool) {
	p := port
	if n, err := strconv.Atoi(port); err == nil {
		p = strconv.Itoa(n)
	}
	for _, r := range g.rules {
		if r.matchHost(h) && (r.FromPort == "" || r.FromPort == p) {
			return r.target(h, port), true
		}
	}
	return "", false
}

// mapsHost reports whether any rule matches the canonical host on some port.
func (g *Guard) mapsHost(h string) bool {
	for _, r := range g.rules {
		if r.matchHost(h) {
			return true
		}
	}
	return false
}

// CheckURLHost vets the host of a URL before anything is sent: a URL that names a
// forbidden address directly (an IP literal in any form a browser reads as one, or a
// "localhost" name) is refused with an EINVALID error on field "url", unless a connect-to
// rule maps the host or private networks are allowed. The guard reads the host only in
// its canonical form (downloader.CanonicalHost, SPEC §2: "①②⑦.⓪.⓪.①" and "0x7f.1" are
// 127.0.0.1), so a host it cannot canonicalise, as a browser would refuse it, is refused
// too. host may carry a port ("127.0.0.1:80", "[::1]:443") or brackets.
func (g *Guard) CheckURLHost(host string) error {
	if g.allowPrivate {
		return nil
	}
	if host == "" {
		return downloader.Invalidf("url", "url has no host")
	}
	h, err := downloader.CanonicalHost(host)
	if err != nil {
		return downloader.Invalidf("url", "url host %q is not a valid address: %s", host, downloader.ErrorMessage(err))
	}
	if g.mapsHost(h) {
		return nil
	}
	if ip, isIP := literalIP(h); isIP {
		if reason, bad := Forbidden(ip); bad {
			return downloader.Invalidf("url", "url names a forbidden address %s (%s)", ip, reason)
		}
		return nil
	}
	if isLocalhostName(h) {
		return downloader.Invalidf("url", "url names a forbidden host %q (loopback)", host)
	}
	return nil
}

// literalIP reports whether a canonical host is an IP address (every IPv4 number form is
// dotted by then, SPEC §2) and which.
func literalIP(canonical string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(canonical)
	return ip, err == nil
}

// isLocalhostName reports whether host is "localhost" or a name under it: RFC 6761 says
// those always resolve to loopback, whatever a resolver answers.
func isLocalhostName(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// DialContext connects to address ("host:port") for network "tcp", "tcp4" or "tcp6".
//
//  1. The first connect-to rule matching host:port wins: its target is dialled as given.
//  2. With private networks allowed, address is dialled as given.
//  3. An IP literal (any form, see CheckURLHost) or a localhost name is checked directly.
//  4. Otherwise the host is resolved once. If ANY answer is forbidden, the dial is refused:
//     a public site has no reason to publish a private address beside its public one, and
//     a mixed answer is a known way to aim a fetcher at an internal service. The allowed
//     answers are then dialled one after the other, by address, never by name again.
//
// A refused destination returns a *ForbiddenError. A resolver failure returns a
// *net.DNSError (wrapping a resolver's own error type when it returned another one), so a
// caller can tell NXDOMAIN (IsNotFound) from a failing resolver.
//
// A ConnectHook in ctx (WithConnectHook) is told of the connection attempt once every
// check has passed, right before the first connect, and may still refuse it.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	rawHost, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("netguard: dial %q: %w", address, err)
	}
	// Callers pass the canonical host (SPEC §2); canonicalising it again is the identity
	// for them, and for any other caller it is what makes the checks below read the host
	// the way a browser would dial it.
	host, err := downloader.CanonicalHost(rawHost)
	if err != nil {
		// No canonical host, no dial: not even by a rule, which matches canonical hosts.
		return nil, &ForbiddenError{Host: rawHost, Reason: "not a valid host: " + downloader.ErrorMessage(err)}
	}
	if target, ok := g.mapCanonical(host, port); ok {
		return g.attempt(ctx, host, func(ctx context.Context) (net.Conn, error) { return g.dialer.DialContext(ctx, network, target) })
	}
	canonicalAddress := net.JoinHostPort(host, port)
	if g.allowPrivate {
		return g.attempt(ctx, host, func(ctx context.Context) (net.Conn, error) {
			return g.dialer.DialContext(ctx, network, canonicalAddress)
		})
	}
	if ip, isIP := literalIP(host); isIP {
		if reason, bad := Forbidden(ip); bad {
			return nil, &ForbiddenError{Host: host, Addr: ip, Reason: reason}
		}
		return g.attempt(ctx, host, func(ctx context.Context) (net.Conn, error) {
			return g.dialer.DialContext(ctx, network, canonicalAddress)
		})
	}
	if isLocalhostName(host) {
		return nil, &ForbiddenError{Host: host, Reason: "loopback name"}
	}

	addrs, err := g.resolve(ctx, network, host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if reason, bad := Forbidden(a); bad {
			return nil, &ForbiddenError{Host: host, Addr: a, Reason: reason}
		}
	}
	return g.attempt(ctx, host, func(ctx context.Context) (net.Conn, error) { return g.dialSerial(ctx, network, host, port, addrs) })
}

// ConnectHook is told of a dial's connection attempt: the moment a packet may first go
// to the origin's address (SPEC §2, a spent slot), after resolution and the SSRF check.
// The limiter spends a request's slot there, so that a site whose connections fail is
// never hammered, while a DNS failure or a refusal of the guard gives the slot back.
type ConnectHook interface {
	// Connecting is called once per dial, right before its first connect (the other
	// answers of a name, tried only if the first fails, are part of the same attempt). A
	// non-nil error refuses the dial before any packet; DialContext returns it wrapped.
	Connecting(ctx context.Context) error
	// Connected is called once after Connecting returned nil, with the dial's error
	// (nil: connected).
	Connected(err error)
}

type connectHookKey struct{}

// WithConnectHook returns ctx carrying h for the dials made with it.
func WithConnectHook(ctx context.Context, h ConnectHook) context.Context {
	return context.WithValue(ctx, connectHookKey{}, h)
}

// attempt runs dial, the connection attempt to host, telling the ConnectHook of ctx (a
// TunnelDialer tells it itself, at its proxy's connect request: tunnelAttempt).
func (g *Guard) attempt(ctx context.Context, host string, dial func(context.Context) (net.Conn, error)) (net.Conn, error) {
	h, _ := ctx.Value(connectHookKey{}).(ConnectHook)
	if h == nil {
		return dial(ctx)
	}
	if _, ok := g.dialer.(TunnelDialer); ok {
		return attemptTunnel(ctx, h, dial)
	}
	if err := h.Connecting(ctx); err != nil {
		return nil, fmt.Errorf("netguard: connection to %s not attempted: %w", host, err)
	}
	c, err := dial(ctx)
	h.Connected(err)
	return c, err
}

func (g *Guard) resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	ipNet := "ip"
	switch network {
	case "tcp4", "udp4":
		ipNet = "ip4"
	case "tcp6", "udp6":
		ipNet = "ip6"
	}
	addrs, err := g.resolver.LookupNetIP(ctx, ipNet, host)
	if err != nil {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return nil, fmt.Errorf("netguard: resolve %s: %w", host, err)
		}
		return nil, &net.DNSError{
			Err:         err.Error(),
			Name:        host,
			IsTimeout:   errors.Is(err, context.DeadlineExceeded),
			IsTemporary: true,
			UnwrapErr:   err,
		}
	}
	out := addrs[:0:0]
	for _, a := range addrs {
		a = a.Unmap()
		if (ipNet == "ip4" && !a.Is4()) || (ipNet == "ip6" && !a.Is6()) {
			continue
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// minDialShare is the least time each address gets when several share a deadline (as in
// package net's own serial dialler).
const minDialShare = 2 * time.Second

// dialSerial tries the checked addresses in order. When ctx has a deadline, each attempt
// gets a fair share of what is left, so one black-holed address cannot eat it all.
func (g *Guard) dialSerial(ctx context.Context, network, host, port string, addrs []netip.Addr) (net.Conn, error) {
	var firstErr, usefulErr error
	for i, a := range addrs {
		if err := ctx.Err(); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			break
		}
		dctx := ctx
		cancel := func() {}
		if dl, ok := ctx.Deadline(); ok && i < len(addrs)-1 {
			left := time.Until(dl)
			share := left / time.Duration(len(addrs)-i)
			if share < minDialShare {
				share = min(minDialShare, left)
			}
			dctx, cancel = context.WithTimeout(ctx, share)
		}
		c, err := g.dialer.DialContext(dctx, network, net.JoinHostPort(a.String(), port))
		cancel()
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if usefulErr == nil && !isLocalRouteError(err) {
			usefulErr = err
		}
	}
	if usefulErr != nil {
		firstErr = usefulErr
	}
	return nil, fmt.Errorf("netguard: dial %s: %w", host, firstErr)
}

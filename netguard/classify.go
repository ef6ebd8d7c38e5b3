package netguard

import (
	"net/netip"
)

// Forbidden classifies an address the downloader must never call on the origin's say-so
// (through DNS or a redirect): loopback, private (RFC 1918, fc00::/7), link-local, CGNAT,
// multicast, unspecified, broadcast, cloud metadata endpoints, documentation, benchmark and
// reserved ranges, every IPv6 address outside global unicast 2000::/3, and IPv4 addresses
// of those kinds embedded in IPv4-mapped, NAT64, 6to4 and Teredo addresses. It returns a
// short reason for the log and the error. The zone of a scoped address is ignored; an
// invalid (zero) address is forbidden. Forbidden is a pure function, safe for concurrent
// use.
func Forbidden(ip netip.Addr) (reason string, forbidden bool) {
	if !ip.IsValid() {
		return "invalid address", true
	}
	ip = ip.WithZone("")
	if ip.Is4In6() {
		if r, bad := forbidden4(ip.Unmap()); bad {
			return "ipv4-mapped " + r, true
		}
		return "", false
	}
	if ip.Is4() {
		return forbidden4(ip)
	}
	return forbidden6(ip)
}

type rangeRule struct {
	prefix netip.Prefix
	reason string
}

func pfx(s, reason string) rangeRule { return rangeRule{netip.MustParsePrefix(s), reason} }

// metadata4 is checked first: these sit inside wider ranges (or in public space, as Azure's
// wire server does) and deserve their own reason in the log.
var metadata4 = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack IMDS
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
	netip.MustParseAddr("169.254.170.23"),  // AWS EKS pod identity
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("192.0.0.192"),     // Oracle Cloud
	netip.MustParseAddr("168.63.129.16"),   // Azure wire server (public space)
}

// ranges4 lists the IPv4 ranges that are not globally reachable unicast (IANA special
// purpose registry), plus the deprecated 6to4 relay anycast.
var ranges4 = []rangeRule{
	pfx("255.255.255.255/32", "broadcast"),
	pfx("0.0.0.0/32", "unspecified"),
	pfx("0.0.0.0/8", "reserved (this network)"),
	pfx("10.0.0.0/8", "private"),
	pfx("100.64.0.0/10", "cgnat"),
	pfx("127.0.0.0/8", "loopback"),
	pfx("169.254.0.0/16", "link-local"),
	pfx("172.16.0.0/12", "private"),
	pfx("192.0.0.0/24", "reserved (ietf protocol assignments)"),
	pfx("192.0.2.0/24", "documentation"),
	pfx("192.88.99.0/24", "reserved (6to4 relay anycast)"),
	pfx("192.168.0.0/16", "private"),
	pfx("198.18.0.0/15", "benchmark"),
	pfx("198.51.100.0/24", "documentation"),
	pfx("203.0.113.0/24", "documentation"),
	pfx("224.0.0.0/4", "multicast"),
	pfx("240.0.0.0/4", "reserved"),
}

func forbidden4(ip netip.Addr) (string, bool) {
	for _, m := range metadata4 {
		if ip == m {
			return "metadata", true
		}
	}
	for _, r := range ranges4 {
		if r.prefix.Contains(ip) {
			return r.reason, true
		}
	}
	return "", false
}

var (
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")
	teredo         = netip.MustParsePrefix("2001::/32")
	sixToFour      = netip.MustParsePrefix("2002::/16")
	metadata6      = []netip.Addr{
		netip.MustParseAddr("fd00:ec2::254"), // AWS IMDS over IPv6
		netip.MustParseAddr("fd00:ec2::23"),  // AWS EKS pod identity
	}
	// outside6 names the common ranges outside 2000::/3, for a readable reason; anything
	// else outside it is "reserved".
	outside6 = []rangeRule{
		pfx("::/128", "unspecified"),
		pfx("::1/128", "loopback"),
		pfx("64:ff9b:1::/48", "private (local-use nat64)"),
		pfx("fc00::/7", "private"),
		pfx("fe80::/10", "link-local"),
		pfx("fec0::/10", "reserved (site-local)"),
		pfx("ff00::/8", "multicast"),
	}
	// inside6 are the non-global ranges inside 2000::/3.
	inside6 = []rangeRule{
		pfx("2001:2::/48", "benchmark"),
		pfx("2001:10::/28", "reserved (orchid)"),
		pfx("2001:20::/28", "reserved (orchid v2)"),
		pfx("2001:db8::/32", "documentation"),
		pfx("3fff::/20", "documentation"),
	}
)

func forbidden6(ip netip.Addr) (string, bool) {
	for _, m := range metadata6 {
		if ip == m {
			return "metadata", true
		}
	}
	b := ip.As16()
	if nat64WellKnown.Contains(ip) {
		v4 := netip.AddrFrom4([4]byte(b[12:16]))
		if r, bad := forbidden4(v4); bad {
			return "nat64 " + r, true
		}
		return "", false
	}
	if !globalUnicast6.Contains(ip) {
		for _, r := range outside6 {
			if r.prefix.Contains(ip) {
				return r.reason, true
			}
		}
		return "reserved", true
	}
	for _, r := range inside6 {
		if r.prefix.Contains(ip) {
			return r.reason, true
		}
	}
	if sixToFour.Contains(ip) {
		if r, bad := forbidden4(netip.AddrFrom4([4]byte(b[2:6]))); bad {
			return "6to4 " + r, true
		}
		return "", false
	}
	if teredo.Contains(ip) {
		// Teredo carries the server's IPv4 in bits 32-63 and the client's, inverted, in
		// the last 32 bits: traffic goes to both, so both must be allowed.
		if r, bad := forbidden4(netip.AddrFrom4([4]byte(b[4:8]))); bad {
			return "teredo server " + r, true
		}
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		if r, bad := forbidden4(netip.AddrFrom4(client)); bad {
			return "teredo client " + r, true
		}
		return "", false
	}
	return "", false
}

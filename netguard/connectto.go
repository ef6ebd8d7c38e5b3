package netguard

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"downloader"
)

// Rule is one curl-style --connect-to HOST1:PORT1:HOST2:PORT2: a request for HOST1:PORT1
// is sent to HOST2:PORT2 instead (the Host header, TLS server name and limiter key stay
// HOST1). An empty FromHost or FromPort matches anything; a FromHost starting with "*."
// matches any subdomain of the rest (not the rest itself). An empty ToHost or ToPort keeps
// the original. IPv6 literals are written in brackets: "[::1]:443:[::1]:8443". The target
// is the operator's choice and always allowed, loopback included.
//
// Hosts are stored normalised (lower case, IDNA to ASCII, no trailing dot, IPv6 without
// brackets) and ports as plain decimal. A Rule is an immutable value.
type Rule struct {
	FromHost string
	FromPort string
	ToHost   string
	ToPort   string
}

// ParseConnectTo parses one HOST1:PORT1:HOST2:PORT2 rule. "*" as HOST1 means any host.
func ParseConnectTo(s string) (Rule, error) {
	fields, err := splitConnectTo(s)
	if err != nil {
		return Rule{}, fmt.Errorf("connect-to %q: %w", s, err)
	}
	var r Rule
	if r.FromHost, err = parseRuleHost(fields[0], true); err != nil {
		return Rule{}, fmt.Errorf("connect-to %q: first host: %w", s, err)
	}
	if r.FromPort, err = parseRulePort(fields[1]); err != nil {
		return Rule{}, fmt.Errorf("connect-to %q: first port: %w", s, err)
	}
	if r.ToHost, err = parseRuleHost(fields[2], false); err != nil {
		return Rule{}, fmt.Errorf("connect-to %q: second host: %w", s, err)
	}
	if r.ToPort, err = parseRulePort(fields[3]); err != nil {
		return Rule{}, fmt.Errorf("connect-to %q: second port: %w", s, err)
	}
	return r, nil
}

// String returns the rule in the form ParseConnectTo reads.
func (r Rule) String() string {
	return bracket(r.FromHost) + ":" + r.FromPort + ":" + bracket(r.ToHost) + ":" + r.ToPort
}

func bracket(h string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

// splitConnectTo splits s into its four colon-separated fields, keeping bracketed IPv6
// literals whole (brackets included).
func splitConnectTo(s string) ([4]string, error) {
	var out [4]string
	rest := s
	for i := range out {
		if i > 0 {
			if rest == "" || rest[0] != ':' {
				return out, fmt.Errorf("want HOST1:PORT1:HOST2:PORT2")
			}
			rest = rest[1:]
		}
		var f string
		if strings.HasPrefix(rest, "[") {
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return out, fmt.Errorf("unterminated [ in field %d", i+1)
			}
			f, rest = rest[:end+1], rest[end+1:]
		} else if j := strings.IndexByte(rest, ':'); j >= 0 {
			f, rest = rest[:j], rest[j:]
		} else {
			f, rest = rest, ""
		}
		out[i] = f
	}
	if rest != "" {
		return out, fmt.Errorf("want HOST1:PORT1:HOST2:PORT2, got extra %q", rest)
	}
	return out, nil
}

func parseRuleHost(f string, allowWildcard bool) (string, error) {
	if f == "" || (allowWildcard && f == "*") {
		return "", nil
	}
	if strings.HasPrefix(f, "[") {
		h, err := downloader.CanonicalHost(f)
		if !strings.HasSuffix(f, "]") || err != nil || !strings.Contains(h, ":") {
			return "", fmt.Errorf("bad IPv6 literal %q", f)
		}
		return h, nil
	}
	wild := ""
	name := f
	if allowWildcard && strings.HasPrefix(f, "*.") {
		wild, name = "*.", f[2:]
	}
	if !utf8.ValidString(name) {
		return "", fmt.Errorf("bad host %q", f)
	}
	for _, c := range name {
		if !(c == '-' || c == '.' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c > 0x7f) {
			return "", fmt.Errorf("bad host %q", f)
		}
	}
	h, err := downloader.CanonicalHost(name)
	if err != nil {
		return "", fmt.Errorf("bad host %q: %s", f, downloader.ErrorMessage(err))
	}
	if strings.Contains(h, ":") || h == "" || strings.HasPrefix(h, ".") || strings.Contains(h, "..") {
		return "", fmt.Errorf("bad host %q", f)
	}
	if again, err := downloader.CanonicalHost(h); err != nil || again != h {
		// The normal form must be a fixed point, or String would not parse back.
		return "", fmt.Errorf("bad host %q", f)
	}
	if wild != "" {
		if _, err := netip.ParseAddr(h); err == nil {
			return "", fmt.Errorf("a wildcard cannot precede an IP address in %q", f)
		}
	}
	return wild + h, nil
}

func parseRulePort(f string) (string, error) {
	if f == "" {
		return "", nil
	}
	if len(f) > 5 {
		return "", fmt.Errorf("bad port %q", f)
	}
	n, err := strconv.Atoi(f)
	if err != nil || n < 1 || n > 65535 || f[0] == '+' || f[0] == '-' {
		return "", fmt.Errorf("bad port %q", f)
	}
	return strconv.Itoa(n), nil
}

// matchHost reports whether the rule's FromHost matches the normalised host.
func (r Rule) matchHost(host string) bool {
	switch {
	case r.FromHost == "":
		return true
	case strings.HasPrefix(r.FromHost, "*."):
		suffix := r.FromHost[1:] // ".example.com"
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix)
	default:
		return r.FromHost == host
	}
}

// target returns where a matching request for host:port goes.
func (r Rule) target(host, port string) string {
	h, p := r.ToHost, r.ToPort
	if h == "" {
		h = host
	}
	if p == "" {
		p = port
	}
	return net.JoinHostPort(h, p)
}

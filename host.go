package downloader

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// maxHostLength bounds a canonical host: a longer name cannot be resolved (RFC 1035) and
// would only bloat the limiter's keys.
const maxHostLength = 253

// browserIDNA is UTS #46 ToASCII with the flags of the WHATWG URL Standard's "domain to
// ASCII" (CheckHyphens false, CheckBidi true, CheckJoiners true, UseSTD3ASCIIRules false,
// nontransitional, VerifyDnsLength false): the profile browsers use, so that "ß" stays
// "ß" (xn--zca), "r3---sn" is a name and "_dmarc" is allowed. The WHATWG forbidden
// domain code points are checked after it (forbiddenDomainByte). A Profile is immutable
// and safe for concurrent use; it is built per call by hostIDNA because the package keeps
// no globals (STYLE), and building one is a few field writes.
func hostIDNA() *idna.Profile {
	return idna.New(
		idna.MapForLookup(),
		idna.BidiRule(),
		idna.Transitional(false),
		idna.StrictDomainName(false),
		idna.CheckHyphens(false),
		idna.CheckJoiners(true),
		idna.VerifyDNSLength(false),
	)
}

// CanonicalHost returns the one canonical form of a host (SPEC §2): the limiter key, the
// SSRF guard's input, the address rule of --connect-to, what is dialled, the Host header
// and the TLS server name. It is the WHATWG URL Standard's host parser for a special
// scheme (percent-decoding, UTS #46 IDNA to ASCII, the forbidden domain code points, the
// IPv4 number forms written as a dotted address, the IPv6 parser and its compressed
// serialisation), then without the trailing dot a browser would keep: "example.com." and
// "example.com" are one site.
//
// host may be a URL's host with its port ("ｓｉｔｅ.test:8080", "[::1]:443") or a key
// already canonical: an IPv6 key is written without brackets ("2001:db8::1"), which no
// URL host can be confused with (a colon is a forbidden host code point). An IP literal's
// key is the address itself: "0x7f.1" is "127.0.0.1", "[2001:DB8:0::1]" is "2001:db8::1".
// An IPv4-mapped IPv6 address ("[::ffff:11.22.33.44]") is refused: it reaches the IPv4
// address, which a browser would key apart from it. The result
// is a fixed point: CanonicalHost(h) == h for every h it returns. Errors are EINVALID on
// field "domain".
func CanonicalHost(host string) (string, error) {
	h, err := canonicalHost(host)
	if err != nil {
		return "", Invalidf("domain", "domain %q is not a valid host: %v", host, err)
	}
	return h, nil
}

func canonicalHost(host string) (string, error) {
	if host == "" {
		return "", errors.New("empty host")
	}
	if host[0] == '[' {
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return "", errors.New("unterminated IPv6 literal")
		}
		if rest := host[end+1:]; rest != "" {
			if rest[0] != ':' || !isPort(rest[1:]) {
				return "", errors.New("bad port after an IPv6 literal")
			}
		}
		return parseIPv6(host[1:end])
	}
	switch strings.Count(host, ":") {
	case 0:
	case 1:
		i := strings.IndexByte(host, ':')
		if !isPort(host[i+1:]) {
			return "", errors.New("bad port")
		}
		host = host[:i]
	default:
		// A bare IPv6 address: a key, never a URL's host.
		return parseIPv6(host)
	}
	return canonicalDomain(host)
}

// isPort reports whether p is a port as a URL may write it: empty or up to 65535 in
// decimal digits (leading zeros allowed, as in a browser).
func isPort(p string) bool {
	if p == "" {
		return true
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
		if n > 65535 {
			return false
		}
	}
	return true
}

// canonicalDomain is the WHATWG host parser's non-IPv6 branch, without the trailing dot,
// and stricter in two ways a browser is not (both refusals, never a different host):
//   - after IDNA, only letters, digits, '-', '_' and '.' are kept: the URL Standard also
//     lets "!$&'()*+,;=`{}~" through, but no such name can be looked up in DNS, net/url
//     refuses several of them in a host, and Chromium writes some percent-encoded ("*"
//     becomes "%2A"), so the Host header would not be the key;
//   - an "xn--" label with nothing after it is refused (golang.org/x/net/idna decodes it
//     to an empty label, which would make "xn--.test" the key ".test").
func canonicalDomain(input string) (string, error) {
	if !utf8.ValidString(input) {
		return "", errors.New("not UTF-8")
	}
	decoded := percentDecode(input)
	if !utf8.ValidString(decoded) {
		return "", errors.New("percent-encoding that is not UTF-8")
	}
	ascii, err := domainToASCII(decoded)
	if err != nil {
		return "", err
	}
	for i := 0; i < len(ascii); i++ {
		if !hostByte(ascii[i]) {
			return "", fmt.Errorf("character %q in a host name", ascii[i])
		}
	}
	if emptyLabels(ascii) > emptyLabels(decoded) {
		return "", errors.New("empty punycode label")
	}
	if ip, isIP, err := parseIPv4(ascii); err != nil {
		return "", err
	} else if isIP {
		return ip.String(), nil
	}
	h := strings.TrimSuffix(ascii, ".")
	if h == "" || strings.HasSuffix(h, ".") {
		// "a.." would keep a dot as the key ("a."), which is not "a": no such name
		// resolves, so it is refused rather than given a second key.
		return "", errors.New("empty host or last label")
	}
	if len(h) > maxHostLength {
		return "", fmt.Errorf("longer than %d characters", maxHostLength)
	}
	return h, nil
}

// plainASCIIHost is domainToASCII's shortcut for the common host: only ASCII letters,
// digits, '-', '_' and '.', and no "xn--" label. UTS #46 maps such a host to itself in
// lower case (every such character is valid or, for upper case, mapped to lower case, and
// there is no punycode to check), so the IDNA tables are not needed for it
// (TestPlainASCIIHostShortcut checks it against the full mapping).
func plainASCIIHost(s string) (string, bool) {
	hasUpper := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			hasUpper = true
		case hostByte(c):
		default:
			return "", false
		}
	}
	if hasUpper {
		s = strings.ToLower(s)
	}
	if s == "" || strings.HasPrefix(s, "xn--") || strings.Contains(s, ".xn--") {
		return "", false
	}
	return s, true
}

// hostByte reports whether c may be in a canonical host name: a lower-case letter, a
// digit, '-', '_' or '.'.
func hostByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// emptyLabels counts the empty labels of a host, its trailing dot aside; the four label
// separators of UTS #46 count as dots.
func emptyLabels(h string) int {
	n, prevDot := 0, true
	for _, c := range h {
		switch c {
		case '.', '\u3002', '\uff0e', '\uff61':
			if prevDot {
				n++
			}
			prevDot = true
		default:
			prevDot = false
		}
	}
	return n
}

// domainToASCII is the WHATWG "domain to ASCII" with beStrict false.
func domainToASCII(s string) (string, error) {
	if lower, ok := plainASCIIHost(s); ok {
		return lower, nil
	}
	ascii, err := hostIDNA().ToASCII(s)
	if err != nil {
		return "", fmt.Errorf("IDNA: %w", err)
	}
	if ascii == "" {
		return "", errors.New("empty host")
	}
	return ascii, nil
}

// percentDecode is the WHATWG percent-decode: a '%' not followed by two hex digits is
// kept as it is (and then refused as a forbidden code point).
func percentDecode(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// parseIPv4 is the WHATWG "ends in a number" test and IPv4 parser: isIP is false for a
// name; err is set for a host that ends in a number but is no valid IPv4 address (a
// browser refuses such a URL). It reads every form a browser accepts: 2130706433,
// 0x7f.1, 0177.0.0.1, 127.1.
func parseIPv4(host string) (ip netip.Addr, isIP bool, err error) {
	// A name is no address unless its last label ends in a number: test that first, with
	// no allocation, since every request's host passes here and nearly all are names.
	t := strings.TrimSuffix(host, ".")
	if !endsInNumber(t[strings.LastIndexByte(t, '.')+1:]) {
		return netip.Addr{}, false, nil
	}
	parts := strings.Split(host, ".")
	if len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	if !endsInNumber(parts[len(parts)-1]) {
		return netip.Addr{}, false, nil
	}
	if len(parts) > 4 {
		return netip.Addr{}, false, errors.New("too many parts for an IPv4 address")
	}
	var nums [4]uint64
	for i, p := range parts {
		n, ok := parseIPv4Number(p)
		if !ok {
			return netip.Addr{}, false, fmt.Errorf("bad IPv4 part %q", p)
		}
		if i < len(parts)-1 && n > 255 {
			return netip.Addr{}, false, fmt.Errorf("IPv4 part %q is over 255", p)
		}
		nums[i] = n
	}
	last := nums[len(parts)-1]
	if last >= 1<<(8*(5-len(parts))) {
		return netip.Addr{}, false, fmt.Errorf("IPv4 part %q is too large", parts[len(parts)-1])
	}
	v := last
	for i := 0; i < len(parts)-1; i++ {
		v += nums[i] << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true, nil
}

// endsInNumber is the WHATWG "ends in a number" test on the last label.
func endsInNumber(last string) bool {
	if last == "" {
		return false
	}
	allDigits := true
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			allDigits = false
			break
		}
	}
	if allDigits {
		return true
	}
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		for i := 2; i < len(last); i++ {
			if !isHex(last[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// parseIPv4Number parses one part: 0x-prefixed hex ("0x" alone is 0), 0-prefixed octal,
// else decimal. Values over 2^32 are reported as not ok.
func parseIPv4Number(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base := uint64(10)
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, p = 16, p[2:]
	case len(p) >= 2 && p[0] == '0':
		base, p = 8, p[1:]
	}
	var n uint64
	for i := 0; i < len(p); i++ {
		c := p[i]
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		n = n*base + d
		if n > 1<<32 {
			return 0, false
		}
	}
	return n, true
}

// parseIPv6 is the WHATWG IPv6 parser with its serialiser: lower-case hex, the first
// longest run of two or more zero pieces compressed, an embedded IPv4 part written as two
// pieces ("::ffff:1.2.3.4" is "::ffff:102:304"). A zone ("%eth0") is refused, as in a
// browser.
func parseIPv6(s string) (string, error) {
	var pieces [8]uint16
	piece, compress := 0, -1
	i := 0
	bad := func(why string) (string, error) { return "", fmt.Errorf("bad IPv6 address %q: %s", s, why) }
	if strings.HasPrefix(s, ":") {
		if !strings.HasPrefix(s, "::") {
			return bad("starts with a single colon")
		}
		i += 2
		piece++
		compress = piece
	}
	for i < len(s) {
		if piece == 8 {
			return bad("too many pieces")
		}
		if s[i] == ':' {
			if compress >= 0 {
				return bad("two compressions")
			}
			i++
			piece++
			compress = piece
			continue
		}
		value, length := 0, 0
		for length < 4 && i < len(s) && isHex(s[i]) {
			value = value<<4 | int(unhex(s[i]))
			i++
			length++
		}
		if i < len(s) && s[i] == '.' {
			if length == 0 {
				return bad("empty IPv4 part")
			}
			i -= length
			if piece > 6 {
				return bad("IPv4 part too late")
			}
			seen := 0
			for i < len(s) {
				v := -1
				if seen > 0 {
					if s[i] == '.' && seen < 4 {
						i++
					} else {
						return bad("bad IPv4 part")
					}
				}
				if i >= len(s) || s[i] < '0' || s[i] > '9' {
					return bad("bad IPv4 part")
				}
				for i < len(s) && s[i] >= '0' && s[i] <= '9' {
					d := int(s[i] - '0')
					switch {
					case v == -1:
						v = d
					case v == 0:
						return bad("leading zero in IPv4 part")
					default:
						v = v*10 + d
					}
					if v > 255 {
						return bad("IPv4 part over 255")
					}
					i++
				}
				pieces[piece] = pieces[piece]<<8 | uint16(v)
				seen++
				if seen == 2 || seen == 4 {
					piece++
				}
			}
			if seen != 4 {
				return bad("IPv4 part has not four numbers")
			}
			break
		}
		if i < len(s) && s[i] == ':' {
			i++
			if i >= len(s) {
				return bad("ends in a colon")
			}
		} else if i < len(s) {
			return bad("bad character")
		}
		pieces[piece] = uint16(value)
		piece++
	}
	if compress >= 0 {
		swaps := piece - compress
		piece = 7
		for piece != 0 && swaps > 0 {
			pieces[piece], pieces[compress+swaps-1] = pieces[compress+swaps-1], pieces[piece]
			piece--
			swaps--
		}
	} else if piece != 8 {
		return bad("too few pieces")
	}
	if pieces[0]|pieces[1]|pieces[2]|pieces[3]|pieces[4] == 0 && pieces[5] == 0xffff {
		// An IPv4-mapped address dials the IPv4 address (the kernel maps it), but a
		// browser keys it as IPv6: two keys for one origin. Refused: write the IPv4
		// address.
		return bad("an IPv4-mapped address (write the IPv4 address)")
	}
	return serializeIPv6(pieces), nil
}

func serializeIPv6(p [8]uint16) string {
	bestStart, bestLen := -1, 1
	for i := 0; i < 8; {
		if p[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && p[j] == 0 {
			j++
		}
		if j-i > bestLen {
			bestStart, bestLen = i, j-i
		}
		i = j
	}
	var b strings.Builder
	for i := 0; i < 8; i++ {
		if i == bestStart {
			if i == 0 {
				b.WriteString("::")
			} else {
				b.WriteString(":")
			}
			i += bestLen - 1
			continue
		}
		b.WriteString(strconv.FormatUint(uint64(p[i]), 16))
		if i < 7 {
			b.WriteByte(':')
		}
	}
	return b.String()
}

package downloader_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// hostSpelling is one generated host as written in a URL, and the URL around it.
type hostSpelling struct {
	host string // as written in the authority, without userinfo or port
	url  string // http://[userinfo@]host[:port]/path
}

// spellingGenerator writes hosts the many ways a URL may: the IPv4 number forms, IPv6
// forms, IDNA, full-width letters and digits, the ideographic dots, percent-encoding, and
// random mutations of all of these (valid and not). Deterministic for one seed.
type spellingGenerator struct {
	r *rand.Rand
}

func newSpellingGenerator(seed uint64) *spellingGenerator {
	return &spellingGenerator{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// spellings returns n spellings (hosts and URLs).
func (g *spellingGenerator) spellings(n int) []hostSpelling {
	out := make([]hostSpelling, 0, n)
	for len(out) < n {
		var h string
		switch g.r.IntN(10) {
		case 0, 1, 2:
			h = g.ipv4()
		case 3, 4:
			h = g.ipv6()
		case 5, 6, 7:
			h = g.domain()
		default:
			h = g.mutate(g.pick())
		}
		out = append(out, hostSpelling{host: h, url: g.url(h)})
	}
	return out
}

func (g *spellingGenerator) pick() string {
	switch g.r.IntN(3) {
	case 0:
		return g.ipv4()
	case 1:
		return g.ipv6()
	}
	return g.domain()
}

// url puts h in an http URL, sometimes with userinfo and a port.
func (g *spellingGenerator) url(h string) string {
	var b strings.Builder
	b.WriteString([]string{"http://", "https://", "HTTP://"}[g.r.IntN(3)])
	switch g.r.IntN(8) {
	case 0:
		b.WriteString("user:pass@")
	case 1:
		b.WriteString("u%40x@")
	}
	b.WriteString(h)
	switch g.r.IntN(6) {
	case 0:
		b.WriteString(":8080")
	case 1:
		b.WriteString(":")
	case 2:
		b.WriteString(":080")
	}
	b.WriteString([]string{"/", "/p?q", "?x", "#f", ""}[g.r.IntN(5)])
	return b.String()
}

// ipv4 writes an address in one of the WHATWG number forms: one to four parts, each in
// decimal, octal or hex, sometimes with a trailing dot, sometimes out of range.
func (g *spellingGenerator) ipv4() string {
	var a uint32
	switch g.r.IntN(4) {
	case 0:
		a = 0x0b16212c // 11.22.33.44
	case 1:
		a = uint32(g.r.IntN(256)) << 24
	default:
		a = g.r.Uint32()
	}
	parts := 1 + g.r.IntN(4)
	var nums []uint64
	switch parts {
	case 1:
		nums = []uint64{uint64(a)}
	case 2:
		nums = []uint64{uint64(a >> 24), uint64(a & 0xffffff)}
	case 3:
		nums = []uint64{uint64(a >> 24), uint64(a >> 16 & 0xff), uint64(a & 0xffff)}
	default:
		nums = []uint64{uint64(a >> 24), uint64(a >> 16 & 0xff), uint64(a >> 8 & 0xff), uint64(a & 0xff)}
	}
	if g.r.IntN(8) == 0 { // out of range or too many parts
		switch g.r.IntN(3) {
		case 0:
			nums[0] += 256
		case 1:
			nums = append(nums, uint64(g.r.IntN(300)))
		default:
			nums[len(nums)-1] += 1 << 32
		}
	}
	s := make([]string, len(nums))
	for i, n := range nums {
		s[i] = g.number(n)
	}
	h := strings.Join(s, ".")
	if g.r.IntN(6) == 0 {
		h += "."
	}
	return h
}

// number writes n in decimal, octal or hex, with the prefix's case and leading zeros
// varied.
func (g *spellingGenerator) number(n uint64) string {
	switch g.r.IntN(4) {
	case 0:
		return "0" + strings.Repeat("0", g.r.IntN(3)) + strconv.FormatUint(n, 8)
	case 1:
		hex := strconv.FormatUint(n, 16)
		if g.r.IntN(2) == 0 {
			hex = strings.ToUpper(hex)
		}
		return []string{"0x", "0X"}[g.r.IntN(2)] + strings.Repeat("0", g.r.IntN(2)) + hex
	}
	return strconv.FormatUint(n, 10)
}

// ipv6 writes a random address (zero runs likely) in brackets, compressed or not, in any
// case, with leading zeros, or with an embedded IPv4 part.
func (g *spellingGenerator) ipv6() string {
	var p [8]uint16
	for i := range p {
		if g.r.IntN(2) == 0 {
			p[i] = uint16(g.r.Uint32())
		}
	}
	if g.r.IntN(4) == 0 { // ::ffff:a.b.c.d
		p = [8]uint16{0, 0, 0, 0, 0, 0xffff, uint16(g.r.Uint32()), uint16(g.r.Uint32())}
	}
	pieces := make([]string, 8)
	for i, v := range p {
		s := strconv.FormatUint(uint64(v), 16)
		switch g.r.IntN(4) {
		case 0:
			s = strings.ToUpper(s)
		case 1:
			s = strings.Repeat("0", 4-len(s)) + s
		}
		pieces[i] = s
	}
	if g.r.IntN(3) == 0 {
		v4 := fmt.Sprintf("%d.%d.%d.%d", p[6]>>8, p[6]&0xff, p[7]>>8, p[7]&0xff)
		pieces = append(pieces[:6], v4)
	}
	s := strings.Join(pieces, ":")
	if g.r.IntN(3) != 0 {
		// Compress one run of zero pieces (not necessarily the longest).
		s = compressOneRun(pieces, g.r)
	}
	switch g.r.IntN(12) {
	case 0:
		s += "%25eth0"
	case 1:
		s = strings.Replace(s, ":", "::", 1)
	case 2:
		s += ":1"
	}
	return "[" + s + "]"
}

func compressOneRun(pieces []string, r *rand.Rand) string {
	var runs [][2]int
	for i := 0; i < len(pieces); {
		if strings.Trim(pieces[i], "0") != "" || strings.Contains(pieces[i], ".") {
			i++
			continue
		}
		j := i
		for j < len(pieces) && strings.Trim(pieces[j], "0") == "" && !strings.Contains(pieces[j], ".") {
			j++
		}
		runs = append(runs, [2]int{i, j})
		i = j
	}
	if len(runs) == 0 {
		return strings.Join(pieces, ":")
	}
	run := runs[r.IntN(len(runs))]
	return strings.Join(pieces[:run[0]], ":") + "::" + strings.Join(pieces[run[1]:], ":")
}

var (
	labelWords = []string{"example", "site", "bücher", "faß", "例子", "测试", "παράδειγμα", "пример", "münchen",
		"xn--bcher-kva", "xn--fsqu00a", "xn--zz", "xn--", "a", "test", "r3---sn-abc", "_dmarc", "ς", "σ", "ﬀ", "ǅ",
		"straße", "İstanbul", "ⓔⓧ", "①②", "x\u200dy", "a\u00adb", "日本", "עברית", "العربية", "0x1g", "1a", "123", "0x10"}
	tlds = []string{"test", "com", "TEST", "测试", "xn--0zwm56d", "jp", "co.uk", "localhost"}
)

// domain writes a name of one to four labels, with case, full-width letters, the
// ideographic dots and percent-encoding varied.
func (g *spellingGenerator) domain() string {
	n := 1 + g.r.IntN(3)
	labels := make([]string, 0, n+1)
	for range n {
		labels = append(labels, labelWords[g.r.IntN(len(labelWords))])
	}
	labels = append(labels, tlds[g.r.IntN(len(tlds))])
	var b strings.Builder
	for i, l := range labels {
		if i > 0 {
			b.WriteString([]string{".", ".", ".", "。", "．", "｡"}[g.r.IntN(6)])
		}
		b.WriteString(g.styleLabel(l))
	}
	if g.r.IntN(8) == 0 {
		b.WriteString(".")
	}
	return b.String()
}

func (g *spellingGenerator) styleLabel(l string) string {
	switch g.r.IntN(6) {
	case 0:
		return strings.ToUpper(l)
	case 1:
		return fullWidth(l)
	case 2:
		return percentEncode(l, g.r)
	}
	return l
}

// fullWidth writes the ASCII letters and digits of s in their full-width forms.
func fullWidth(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c > ' ' && c < 0x7f {
			c += 0xff01 - '!'
		}
		b.WriteRune(c)
	}
	return b.String()
}

// percentEncode encodes some bytes of s.
func percentEncode(s string, r *rand.Rand) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if r.IntN(2) == 0 {
			fmt.Fprintf(&b, "%%%02X", s[i])
		} else {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// mutationChars are inserted by mutate: characters a host may or may not hold, but none
// that ends an authority ('/', '?', '#', '\\') or splits it ('@', ':', '[', ']').
var mutationChars = []string{"-", "_", "*", "~", "!", "$", "&", "'", "(", ")", "+", ",", ";", "=", "%", " ", "<",
	">", "^", "|", "{", "}", "`", "\"", "\x7f", "\x01", "%00", "%20", "%25", "%2e", "%2E", "%41", "%C3%BC", "%ff",
	"。", "．", "｡", "ü", "ß", "Ａ", "１", "\u200c", "\u200d", "\u00ad", "\ufeff", "ﬁ", "™", "½", "Ⅻ", "\u0301", "x",
	"0", "0x", "."}

// mutate changes a spelling at random: inserts, deletes, case, dots and encodings.
func (g *spellingGenerator) mutate(h string) string {
	for range 1 + g.r.IntN(3) {
		inner, wrap := h, false
		if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
			inner, wrap = h[1:len(h)-1], true
		}
		runes := []rune(inner)
		i := g.r.IntN(len(runes) + 1)
		switch g.r.IntN(6) {
		case 0, 1:
			ins := mutationChars[g.r.IntN(len(mutationChars))]
			inner = string(runes[:i]) + ins + string(runes[i:])
		case 2:
			if len(runes) > 1 && i < len(runes) {
				inner = string(runes[:i]) + string(runes[i+1:])
			}
		case 3:
			inner = strings.ToUpper(inner)
		case 4:
			inner = strings.Replace(inner, ".", []string{"。", "．", "｡", "%2e", ".."}[g.r.IntN(5)], 1)
		default:
			inner = fullWidth(inner)
		}
		h = inner
		if wrap {
			h = "[" + inner + "]"
		}
	}
	return h
}

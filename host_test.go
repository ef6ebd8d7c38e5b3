package downloader

import "testing"

// TestParseIPv4 is the WHATWG IPv4 parser on its own (the number forms CanonicalHost
// writes as a dotted address).
func TestParseIPv4(t *testing.T) {
	tests := []struct {
		host   string
		want   string // "" = not an IP (a host name)
		hasErr bool
	}{
		{"2130706433", "127.0.0.1", false},
		{"0x7f000001", "127.0.0.1", false},
		{"0x7f.1", "127.0.0.1", false},
		{"0X7F.0.0.1", "127.0.0.1", false},
		{"0177.0.0.1", "127.0.0.1", false},
		{"0177.1", "127.0.0.1", false},
		{"127.1", "127.0.0.1", false},
		{"127.0.1", "127.0.0.1", false},
		{"127.0.0.1.", "127.0.0.1", false},
		{"10.0x10.1", "10.16.0.1", false},
		{"0", "0.0.0.0", false},
		{"0x", "0.0.0.0", false},
		{"3232235777", "192.168.1.1", false},
		{"4294967295", "255.255.255.255", false},
		{"4294967296", "", true},
		{"256.1.1.1", "", true},
		{"1.2.3.4.5", "", true},
		{"1.2.3.08", "", true}, // 08 is not octal
		{"1.2.3.0x", "1.2.3.0", false},
		{"1..2", "", true},
		{"example.com", "", false},
		{"a.1x", "", false},
		{"1.example", "", false},
		{"xn--n3h.com", "", false},
	}
	for _, tt := range tests {
		ip, isIP, err := parseIPv4(tt.host)
		if (err != nil) != tt.hasErr {
			t.Errorf("parseIPv4(%q) err = %v, want error %v", tt.host, err, tt.hasErr)
			continue
		}
		got := ""
		if isIP {
			got = ip.String()
		}
		if got != tt.want {
			t.Errorf("parseIPv4(%q) = %q, want %q", tt.host, got, tt.want)
		}
	}
}

// TestPlainASCIIHostShortcut checks plainASCIIHost against the full UTS #46 mapping for
// every host of up to 4 characters over an alphabet that holds each class it accepts, and
// more: where it answers, the mapping must give the same host.
func TestPlainASCIIHostShortcut(t *testing.T) {
	const alphabet = "aZ09-_.xn"
	hosts := []string{"Example.COM", "xn--nxasmq6b.com", "XN--NXASMQ6B.COM", "a.xn--b", "a..b", ".a", "a-.b", "-a.b",
		"127.0.0.1.", "0x7F.1", "r3---sn-abc", "_dmarc.example", "a.b."}
	for n := 1; n <= 4; n++ {
		var gen func(prefix string)
		gen = func(prefix string) {
			if len(prefix) == n {
				hosts = append(hosts, prefix)
				return
			}
			for i := 0; i < len(alphabet); i++ {
				gen(prefix + alphabet[i:i+1])
			}
		}
		gen("")
	}
	answered := 0
	for _, h := range hosts {
		short, ok := plainASCIIHost(h)
		if !ok {
			continue
		}
		answered++
		full, err := hostIDNA().ToASCII(h)
		if err != nil || full != short {
			t.Errorf("plainASCIIHost(%q) = %q, the full mapping gives %q, %v", h, short, full, err)
		}
	}
	if answered < 5000 {
		t.Errorf("the shortcut answered only %d hosts", answered)
	}
}

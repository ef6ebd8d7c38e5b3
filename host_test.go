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

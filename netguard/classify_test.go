package netguard

import (
	"net/netip"
	"strings"
	"testing"
)

// TestForbidden classifies addresses only: nothing here dials.
func TestForbidden(t *testing.T) {
	tests := []struct {
		addr   string
		reason string // "" = allowed; otherwise a substring of the reason
	}{
		// public
		{"93.184.215.14", ""},
		{"1.1.1.1", ""},
		{"8.8.8.8", ""},
		{"100.63.255.255", ""}, // just below CGNAT
		{"100.128.0.0", ""},    // just above CGNAT
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.169.0.1", ""},
		{"198.17.255.255", ""},
		{"198.20.0.0", ""},
		{"223.255.255.255", ""},
		{"2606:4700:4700::1111", ""},
		{"2001:4860:4860::8888", ""},
		{"64:ff9b::808:808", ""},          // NAT64 of 8.8.8.8
		{"2002:0808:0808::1", ""},         // 6to4 of 8.8.8.8
		{"2001:0:808:808::f7f7:f7f7", ""}, // Teredo server 8.8.8.8, client ^f7f7f7f7 = 8.8.8.8
		{"::ffff:8.8.8.8", ""},

		// IPv4 special ranges
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "this network"},
		{"10.0.0.1", "private"},
		{"10.255.255.255", "private"},
		{"100.64.0.1", "cgnat"},
		{"100.127.255.255", "cgnat"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"169.254.0.1", "link-local"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.0.0.8", "ietf"},
		{"192.0.2.1", "documentation"},
		{"192.88.99.1", "6to4 relay"},
		{"192.168.1.1", "private"},
		{"198.18.0.1", "benchmark"},
		{"198.19.255.255", "benchmark"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},

		// metadata
		{"169.254.169.254", "metadata"},
		{"169.254.170.2", "metadata"},
		{"100.100.100.200", "metadata"},
		{"192.0.0.192", "metadata"},
		{"168.63.129.16", "metadata"},
		{"fd00:ec2::254", "metadata"},
		{"::ffff:169.254.169.254", "metadata"},

		// IPv6
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"fc00::1", "private"},
		{"fd12:3456::1", "private"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"febf::1", "link-local"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"ff05::1:3", "multicast"},
		{"100::1", "reserved"},
		{"::127.0.0.1", "reserved"}, // deprecated IPv4-compatible
		{"5f00::1", "reserved"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"2001:2::1", "benchmark"},
		{"2001:10::1", "orchid"},
		{"2001:20::1", "orchid"},
		{"64:ff9b:1::1", "local-use nat64"},

		// embeddings
		{"::ffff:127.0.0.1", "ipv4-mapped loopback"},
		{"::ffff:7f00:1", "ipv4-mapped loopback"},
		{"::ffff:10.0.0.1", "ipv4-mapped private"},
		{"64:ff9b::7f00:1", "nat64 loopback"},
		{"64:ff9b::a9fe:a9fe", "nat64 metadata"},
		{"64:ff9b::c0a8:101", "nat64 private"},
		{"2002:7f00:1::1", "6to4 loopback"},
		{"2002:a9fe:a9fe::", "6to4 metadata"},
		{"2002:c0a8:0101::1", "6to4 private"},
		{"2001:0:7f00:1::", "teredo server loopback"},
		{"2001:0:808:808::80ff:fffe", "teredo client loopback"}, // ^80fffffe = 127.0.0.1
		{"2001:0:808:808::3f57:fef5", "teredo client private"},  // ^3f57fef5 = 192.168.1.10
	}
	for _, tt := range tests {
		ip, err := netip.ParseAddr(tt.addr)
		if err != nil {
			t.Fatalf("ParseAddr(%q): %v", tt.addr, err)
		}
		reason, bad := Forbidden(ip)
		if tt.reason == "" {
			if bad {
				t.Errorf("Forbidden(%s) = %q, want allowed", tt.addr, reason)
			}
			continue
		}
		if !bad || !strings.Contains(reason, tt.reason) {
			t.Errorf("Forbidden(%s) = %q, %v; want forbidden with %q", tt.addr, reason, bad, tt.reason)
		}
	}
	if _, bad := Forbidden(netip.Addr{}); !bad {
		t.Error("the zero Addr must be forbidden")
	}
}

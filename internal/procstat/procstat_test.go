package procstat

import (
	"os"
	"strconv"
	"testing"
)

func TestFields(t *testing.T) {
	self := Fields("self")
	if len(self) < 13 {
		t.Fatalf("Fields(self) = %v; want at least 13 fields", self)
	}
	if self[0] != "R" && self[0] != "S" {
		t.Errorf("own state %q, want R or S", self[0])
	}
	if self[1] != strconv.Itoa(os.Getppid()) {
		t.Errorf("own ppid %q, want %d", self[1], os.Getppid())
	}
	if f := Fields(strconv.Itoa(os.Getpid())); len(f) != len(self) {
		t.Errorf("Fields(own pid) has %d fields, Fields(self) %d", len(f), len(self))
	}
	if f := Fields("999999999"); f != nil {
		t.Errorf("Fields of no process = %v; want nil", f)
	}
}

func TestParseHostCPU(t *testing.T) {
	tests := []struct {
		in          string
		busy, total uint64
		ok          bool
	}{
		{"cpu  10 2 3 100 5 1 1 0 7 0\ncpu0 1 1 1 1 1 1 1 1\n", 17, 122, true},
		{"cpu  10 2 3 100\n", 15, 115, true}, // old kernels: no iowait and after
		{"cpu0 1 2 3 4 5\n", 0, 0, false},
		{"cpu  1 x 3 4 5\n", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tt := range tests {
		busy, total, ok := parseHostCPU(tt.in)
		if busy != tt.busy || total != tt.total || ok != tt.ok {
			t.Errorf("parseHostCPU(%q) = %d, %d, %v; want %d, %d, %v", tt.in, busy, total, ok, tt.busy, tt.total, tt.ok)
		}
	}
	if _, total, ok := HostCPU(); !ok || total == 0 {
		t.Errorf("HostCPU() total=%d ok=%v on this host", total, ok)
	}
}

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

package testkit

import (
	"testing"
	"time"
)

// TestNotifyBuffer: a waiter sees text written after it started waiting (woken by the
// write, not by a poll), and gives up when its deadline fires without it.
func TestNotifyBuffer(t *testing.T) {
	for _, tt := range []struct {
		name   string
		writes []string
		want   string
		isSeen bool
	}{
		{"written before the wait", []string{"start\nlistening\n"}, "listening", true},
		{"written in pieces during the wait", []string{"list", "ening\n"}, "listening", true},
		{"never written", []string{"start\n"}, "listening", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b NotifyBuffer
			deadline := make(chan time.Time)
			waiting := make(chan bool, 1)
			if len(tt.writes) > 0 {
				b.Write([]byte(tt.writes[0]))
			}
			go func() { waiting <- b.WaitFor(tt.want, deadline) }()
			for _, w := range tt.writes[1:] {
				b.Write([]byte(w))
			}
			if !tt.isSeen {
				close(deadline) // the waiter can only see the deadline now
			}
			if got := <-waiting; got != tt.isSeen {
				t.Errorf("WaitFor(%q) = %v after %q, want %v", tt.want, got, b.String(), tt.isSeen)
			}
		})
	}
}

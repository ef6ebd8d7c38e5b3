package testkit

import (
	"testing"
	"time"
)

func TestEventually(t *testing.T) {
	tests := []struct {
		name    string
		limit   time.Duration
		trueAt  int // the check at which cond first holds; 0: never
		want    bool
		wantMin int // checks made at least
	}{
		{"holds at once", time.Minute, 1, true, 1},
		{"holds at the third check", time.Minute, 3, true, 3},
		{"never holds, no time to wait", 0, 0, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			got := Eventually(tt.limit, func() bool { n++; return tt.trueAt != 0 && n >= tt.trueAt })
			if got != tt.want || n < tt.wantMin {
				t.Errorf("Eventually = %v after %d checks, want %v after at least %d", got, n, tt.want, tt.wantMin)
			}
		})
	}
}

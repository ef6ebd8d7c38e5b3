package netguard

import (
	"context"
	"downloader/internal/testkit"
	"errors"
	"io"
	"net/netip"
	"sync"
	"testing"
)

// recordingHook records what a dial told it, and refuses when refuse is set.
type recordingHook struct {
	mu        sync.Mutex
	refuse    error
	attempts  int
	connected []error
	dialsSeen int // the dialer's count when Connecting ran
	dialer    *checkDialer
}

func (h *recordingHook) Connecting(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempts++
	h.dialsSeen = len(h.dialer.addresses())
	return h.refuse
}

func (h *recordingHook) Connected(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.connected = append(h.connected, err)
}

// TestConnectHook: the hook hears of a connection attempt only once resolution and the
// SSRF check passed, right before the first connect (SPEC §2: the attempt spends the
// slot; a DNS failure or a refusal of the guard does not), and can refuse it.
func TestConnectHook(t *testing.T) {
	origin, accepts := loopbackServer(t)
	res := &testkit.Resolver{Answers: map[string][]netip.Addr{
		"public.test":  {netip.MustParseAddr("93.184.215.14")},
		"private.test": {netip.MustParseAddr("10.0.0.1")},
	}}
	refusedErr := errors.New("not your turn")
	tests := []struct {
		name         string
		rules        []string
		address      string
		refuse       error
		wantAttempts int
		wantErr      bool
		wantDialErr  bool // Connected was told of a failed dial
	}{
		{"resolved and dialled", nil, "public.test:80", nil, 1, false, false},
		{"NXDOMAIN: no attempt", nil, "nx.test:80", nil, 0, true, false},
		{"forbidden answer: no attempt", nil, "private.test:80", nil, 0, true, false},
		{"forbidden literal: no attempt", nil, "10.1.2.3:80", nil, 0, true, false},
		{"connect-to target", []string{"mapped.test:80:" + origin}, "mapped.test:80", nil, 1, false, false},
		{"connect-to target refused by the peer", []string{"closed.test:80:127.0.0.1:1"}, "closed.test:80", nil, 1, true, true},
		{"the hook refuses: nothing is dialled", nil, "public.test:80", refusedErr, 1, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &checkDialer{t: t, public: map[string]bool{"93.184.215.14:80": true}}
			g := New(Config{ConnectTo: mustRules(t, tt.rules...), Resolver: res, Dialer: d})
			h := &recordingHook{refuse: tt.refuse, dialer: d}
			c, err := g.DialContext(WithConnectHook(context.Background(), h), "tcp", tt.address)
			if c != nil {
				// The origin greets after counting the accept: reading the greeting
				// makes the count below exact, however late its goroutine runs.
				io.ReadFull(c, make([]byte, 2))
				c.Close()
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.refuse != nil && !errors.Is(err, tt.refuse) {
				t.Errorf("err = %v, want the hook's refusal wrapped", err)
			}
			if h.attempts != tt.wantAttempts {
				t.Errorf("Connecting called %d times, want %d", h.attempts, tt.wantAttempts)
			}
			if h.attempts > 0 && h.dialsSeen != 0 {
				t.Errorf("Connecting ran after %d dials, want before the first", h.dialsSeen)
			}
			switch {
			case tt.refuse != nil:
				if len(d.addresses()) != 0 || len(h.connected) != 0 {
					t.Errorf("refused attempt dialled %v, Connected %v", d.addresses(), h.connected)
				}
			case tt.wantAttempts == 1:
				if len(h.connected) != 1 || (h.connected[0] != nil) != tt.wantDialErr {
					t.Errorf("Connected told %v, want one call (failed: %v)", h.connected, tt.wantDialErr)
				}
			}
		})
	}
	if accepts() != 1 {
		t.Errorf("origin accepted %d connections, want 1 (the connect-to case)", accepts())
	}
}

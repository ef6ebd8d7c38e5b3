package netguard

import (
	"context"
	"net"
	"sync"
)

// TunnelDialer is a Config.Dialer that reaches every address through an operator's egress
// proxy (package egressproxy: HTTP CONNECT or SOCKS5). The guard still decides on the
// target: it resolves and checks the name itself and hands the dialer the checked address
// ("ip:port"), never a name the proxy could resolve to a forbidden address.
//
// Through a proxy the wire moment (SPEC §2, a spent slot) is not the connection to the
// proxy but the connect request the proxy acts on: only then may a packet reach the
// origin's address. So the guard does not call the ConnectHook before the dial; the
// dialer calls Connecting(ctx) right before it sends that request, and the guard tells
// the hook the dial's end (Connected) only when Connecting let it out. A proxy that cannot
// be reached, or refuses us before the request, leaves the slot unspent.
type TunnelDialer interface {
	ContextDialer
	// DialsThroughProxy marks the dialer as one that calls Connecting itself.
	DialsThroughProxy()
}

// tunnelAttempt is one guarded dial's connection attempt through a TunnelDialer: the
// hook is asked once, whichever of the checked addresses is tried first (the others,
// tried only if it fails, are part of the same attempt, as in a direct dial).
type tunnelAttempt struct {
	h ConnectHook

	mu     sync.Mutex
	called bool  // guarded by mu
	err    error // the hook's answer; guarded by mu
}

type tunnelAttemptKey struct{}

// Connecting is what a TunnelDialer calls right before it asks its proxy to connect to the
// target: the moment of the dial's connection attempt. It returns the ConnectHook's
// answer (a non-nil error: nothing may be asked of the proxy; the dialer closes its
// connection to it and returns the error wrapped). Outside a guarded dial with a hook it
// returns nil. Safe for concurrent use.
func Connecting(ctx context.Context) error {
	a, _ := ctx.Value(tunnelAttemptKey{}).(*tunnelAttempt)
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.called {
		a.called = true
		a.err = a.h.Connecting(ctx)
	}
	return a.err
}

// attemptTunnel is attempt for a TunnelDialer.
func attemptTunnel(ctx context.Context, h ConnectHook, dial func(context.Context) (net.Conn, error)) (net.Conn, error) {
	a := &tunnelAttempt{h: h}
	c, err := dial(context.WithValue(ctx, tunnelAttemptKey{}, a))
	a.mu.Lock()
	attempted := a.called && a.err == nil
	a.mu.Unlock()
	if attempted {
		h.Connected(err)
	}
	return c, err
}

package render

import (
	"crypto/tls"
	"net"
	"time"
)

// seams are the wiring only tests give a pool, kept out of Config (the operator's
// settings): New makes a pool with none (the zero value is production's behaviour), and
// the tests call newPool with theirs. What a pool tells of itself goes through Trace;
// nothing here changes what a render does, only where the pool listens and what it trusts
// or waits for in a test's world.
type seams struct {
	// affinityWait bounds a render's wait for its site's context (affinity.go); zero means
	// maxAffinityWait. Tests shorten it to see the wait given up.
	affinityWait time.Duration
	// guardProxyLn, when set, is the guard proxy's listener (tests, which must know the
	// address before they start the server).
	guardProxyLn net.Listener
	// chainTLS, when set, is the TLS configuration of resolveChain's requests (tests,
	// whose origins have a test CA); nil: the system's roots.
	chainTLS *tls.Config
	// extraFlags are added to the local browser's flags (tests: a certificate flag for
	// their HTTPS origins, which the browser must take at the first handshake as it takes
	// a real site's: each refused handshake would be a tunnel of its own).
	extraFlags []string
	// browser, when set, is a running local browser the pool connects to, on a websocket
	// of its own, instead of launching one: tests run many pools on one browser, each
	// with its own browser contexts (a launch costs about 2 CPU-seconds). The pool is
	// otherwise a local one (Chromium's profile, no canary); the browser's owner launched
	// it with localFlags and owns its deny listener, so extraFlags and BinaryPath do not
	// apply.
	browser runningBrowser
}

// runningBrowser is a browser someone else launched and closes (seams.browser).
type runningBrowser interface {
	// websocketURL is the browser's DevTools websocket:
	// ws://127.0.0.1:port/devtools/browser/id.
	websocketURL() string
}

// poolConfig is a pool's configuration: the operator's, and the seams.
type poolConfig struct {
	Config
	seams
}

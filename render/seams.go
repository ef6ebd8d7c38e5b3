package render

import (
	"crypto/tls"
	"net"
	"time"
)

// seams are what only tests and benchmarks change in a pool, kept out of Config (the
// operator's settings): New makes a pool with none (the zero value is production's
// behaviour), and the tests call newPool with theirs.
type seams struct {
	// frames is what happens to iframe documents on other hosts; only tests and
	// benchmarks change it (docs/benchmarks-render.md has the measurement behind the
	// default, frameAdmitNow).
	frames frameMode
	// refillAtLoad starts a render's replacement warm tab at the page's load event instead
	// of when its network first goes quiet; only benchmarks set it
	// (docs/benchmarks-render.md).
	refillAtLoad bool
	// debugf, when set, is told every CDP message the local browser's connection sends
	// ("-> {...}") and receives; only benchmarks set it, to count the protocol calls of a
	// render (docs/benchmarks-render.md).
	debugf func(format string, args ...any)
	// keepAgents leaves the CSS, DOM and Log agents chromedp enables on in the pool's tabs
	// (quietAgents); only benchmarks set it.
	keepAgents bool
	// onWipe, when set, is told how long each wipe between two renders of a long-lived
	// tab took; only benchmarks set it.
	onWipe func(time.Duration)
	// onTakeTab, when set, is told how long each render waited for its tab (from asking
	// for one to having it: a spare's wipe or a new tab's making included); only
	// benchmarks set it.
	onTakeTab func(time.Duration)
	// affinityWait bounds a render's wait for its site's context (affinity.go); zero means
	// maxAffinityWait. onAffinityWait, when set, is told when a render starts that wait.
	// Only tests set them.
	affinityWait   time.Duration
	onAffinityWait func(site string)

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
}

// poolConfig is a pool's configuration: the operator's, and the seams.
type poolConfig struct {
	Config
	seams
}

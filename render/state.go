package render

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
)

// renderState is what a render shares with its proxy and its pauser. Safe for concurrent
// use.
type renderState struct {
	clk    clock.Clock
	domain string        // the page's normalised host
	over   chan struct{} // closed by release

	mu             sync.Mutex
	adm            *limiter.Admission // nil: no limiter (or released)
	released       bool               // Render returned: adm is the caller's again
	first          *limiter.WireGate  // adm's passage to the wire: the first request to domain (wire.go)
	seen           bool               // the proxy saw at least one request
	blocked        int
	tunnelFailures map[string]downloader.Cause
	hops           []*hopAdmission // the render's own admissions of main document hops
	refused        bool            // a hop was not admitted in time
	unwiredHops    atomic.Int32    // hops admitted and not yet on the wire

	caps               subrequestCaps
	pausedCount        bool           // the tab's pauser counts the https sub-requests, the proxy the plain-http ones it was not told of
	decided            map[string]int // plain-http URLs the pauser let through, not yet seen by the proxy
	atProxy            *proxyHops     // the proxy admits the main document hops (interceptProxy)
	tunnelCredits      map[string]int // https requests the pauser let go on, per host, whose tunnel is counted already (tunnelcaps.go)
	tunnelSubCount     int            // tunnels counted as sub-requests of their own, with a pauser
	tunnelRefusedCount int            // of them, refused at a cap
	subCount           int            // sub-requests let through
	subByHost          map[string]int // of them, per host other than the page's
	capped             int            // sub-requests refused at a cap
	chainRedirects     int            // redirects resolveChain followed (interceptProxy)
	proxySkip          skipSet        // the types refused at the proxy (interceptProxy)
	proxySkipped       int            // of them, requests refused
	popups             int            // windows the page tried to open
	skippedFrames      int            // cross-host iframe documents not admitted now
}

// subrequestCaps bound the sub-requests of one render (SPEC §3): they go out under the
// render's one admission, so without a bound a page could turn a render into a flood of
// its own host or of any other. Zero means no bound.
type subrequestCaps struct {
	total   int // per render
	perHost int // per render and host other than the page's own
}

func newRenderState(clk clock.Clock, domain string, adm *limiter.Admission) *renderState {
	return &renderState{clk: clk, domain: domain, adm: adm, first: limiter.NewWireGate(context.Background(), adm), over: make(chan struct{})}
}

// admitSubrequest counts one sub-request to domain (the page's own requests after its
// first main document: scripts, styles, XHR, fetch, beacons, same-host frames) and
// reports whether the caps let it go. A refused one is counted capped and never sent.
// The main documents and admitted hops are not sub-requests; "other host" is any host
// but the page's and its admitted hops'.
func (st *renderState) admitSubrequest(domain string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.admitSubrequestLocked(domain)
}

// admitSubrequestLocked is admitSubrequest with st.mu held.
func (st *renderState) admitSubrequestLocked(domain string) bool {
	if st.caps.total > 0 && st.subCount >= st.caps.total {
		st.capped++
		return false
	}
	if st.caps.perHost > 0 && !st.ownDomain(domain) {
		if st.subByHost[domain] >= st.caps.perHost {
			st.capped++
			return false
		}
		if st.subByHost == nil {
			st.subByHost = make(map[string]int)
		}
		st.subByHost[domain]++
	}
	st.subCount++
	return true
}

// ownDomain reports whether domain is the page's or one of its admitted hops'. Requires
// st.mu held.
func (st *renderState) ownDomain(domain string) bool {
	if domain == st.domain {
		return true
	}
	for _, h := range st.hops {
		if h.domain == domain {
			return true
		}
	}
	return false
}

func (st *renderState) countPopup() {
	st.mu.Lock()
	st.popups++
	st.mu.Unlock()
}

func (st *renderState) countSkippedFrame() {
	st.mu.Lock()
	st.skippedFrames++
	st.mu.Unlock()
}

// guardCounts are the health signal's counts of what the render's guards kept from
// other sites.
type guardCounts struct {
	popups, skippedFrames, capped int
}

func (st *renderState) guardCounts() guardCounts {
	st.mu.Lock()
	defer st.mu.Unlock()
	return guardCounts{popups: st.popups, skippedFrames: st.skippedFrames, capped: st.capped}
}

// fill sets the health signal's guard counts.
func (c guardCounts) fill(hs *downloader.HealthSignal) {
	hs.PopupCount, hs.SkippedFrameCount, hs.CappedSubrequestCount = &c.popups, &c.skippedFrames, &c.capped
}

// countsAtPauser makes the tab's pauser count the sub-requests it sees (every https://
// request of the page's frames, where the proxy sees only a tunnel) and tell the proxy
// which plain http:// requests it let through (documents): the proxy counts the others.
func (st *renderState) countsAtPauser() {
	st.mu.Lock()
	st.pausedCount = true
	st.mu.Unlock()
}

// markDecided records that the pauser let the plain http:// request u go on (a document,
// or a same-host iframe it counted itself): not one for the proxy to count.
func (st *renderState) markDecided(u string) {
	st.mu.Lock()
	if st.decided == nil {
		st.decided = make(map[string]int)
	}
	st.decided[u]++
	st.mu.Unlock()
}

// proxyCounts reports whether the proxy counts the plain http:// request r under the
// render's caps: with a pauser, every one it did not let through itself (the pauser does
// not pause plain-http sub-requests); without one, every one but a navigation of the
// page's own host. A document the pauser let through whose request never came leaves a
// mark that one later request to the same URL uses up: at most one uncounted request per
// document the pauser admitted or counted.
func (st *renderState) proxyCounts(r *http.Request) bool {
	st.mu.Lock()
	paused := st.pausedCount
	if paused {
		u := r.URL.String()
		if n := st.decided[u]; n > 0 {
			if n == 1 {
				delete(st.decided, u)
			} else {
				st.decided[u] = n - 1
			}
			st.mu.Unlock()
			return false
		}
	}
	st.mu.Unlock()
	return paused || !isMainDocument(r, st.domain)
}

var errReleased = errors.New("render proxy: render over")

// release hands the admission back to Render's caller: the proxy no longer touches it.
// The render's own hop admissions are given back (Cancel, or Done once on the wire).
func (st *renderState) release() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.released {
		return
	}
	st.released = true
	close(st.over)
	st.releaseHops()
}

func (st *renderState) sawRequest() {
	st.mu.Lock()
	st.seen = true
	st.mu.Unlock()
}

func (st *renderState) countBlocked() {
	st.mu.Lock()
	st.blocked++
	st.mu.Unlock()
}

func (st *renderState) recordTunnelFailure(hostport string, c downloader.Cause) {
	st.mu.Lock()
	if st.tunnelFailures == nil {
		st.tunnelFailures = make(map[string]downloader.Cause)
	}
	st.tunnelFailures[hostport] = c
	st.mu.Unlock()
}

func (st *renderState) snapshot() (seen bool, blocked int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.seen, st.blocked
}

// tunnelFailure is the cause our proxy recorded for a request to hostport it could not
// make, CauseReported (none) when it recorded none.
func (st *renderState) tunnelFailure(hostport string) downloader.Cause {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.tunnelFailures[hostport]
}

// isMainDocument tells, without a pauser, a navigation of the page's own host (the main
// document, a same-host hop) from a sub-request, by the browser's fetch metadata.
func isMainDocument(r *http.Request, domain string) bool {
	if r.Header.Get("Sec-Fetch-Dest") != "document" {
		return false
	}
	d, err := downloader.CanonicalHost(r.URL.Host)
	return err == nil && d == domain
}

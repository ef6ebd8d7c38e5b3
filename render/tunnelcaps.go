package render

// Every connection a render opens is under its caps (SPEC §3), whatever opens it. The
// render's proxy is the one place every connection of the browser passes: a plain-http
// request is counted there unless the pauser let it through itself (proxyCounts), and a
// CONNECT tunnel here. A tunnel is at least one request, and on Chromium's profile it is
// what a WebSocket handshake (ws: and wss: alike: Chromium tunnels every WebSocket through
// an HTTP proxy), a shared or service worker's HTTPS request, or any other request the
// tab's pauser does not see, looks like to us.
//
// The rule that keeps one request from being counted twice: every https:// request the
// pauser lets go on (a document, an admitted hop or frame, a sub-request it counted under
// the caps) leaves one tunnel credit for its host. A CONNECT to a host with a credit uses
// it up and is not counted again; one without is a sub-request of its own, counted under
// the render's caps (the page's own host under the total only) and refused over them. So
// the tunnels to a host are never more than the requests to it the caps admitted: a
// credit left by a request that reused a connection can carry one later tunnel (a
// WebSocket, say), which is still within the caps.
//
// What a tunnel can still carry: several requests, one after another on a kept-alive
// connection or at once as HTTP/2 streams, to the host it was admitted for, and only that
// host (the proxy dialled it; a request for another host needs a tunnel of its own). The
// page's and its dedicated workers' requests are each paused and counted by the pauser
// whatever connection they ride; what rides a tunnel unseen is only what the page's pauser
// does not see (a service worker's requests; a shared worker's on a remote endpoint, the
// local browser has none: --disable-blink-features=SharedWorker), bounded by the number
// of tunnels (the caps), the render's deadline, and the proxy closing every tunnel when
// the render ends. docs/renderers.md has the table.

// creditTunnel records that the pauser let an https:// request to domain go on: the
// tunnel it may open is counted already.
func (st *renderState) creditTunnel(domain string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.tunnelCredits == nil {
		st.tunnelCredits = make(map[string]int)
	}
	st.tunnelCredits[domain]++
}

// admitTunnel decides on a CONNECT to domain (port 443 or any other) and reports whether
// it may be dialled. With a pauser (Chromium's profile): a tunnel with a credit goes on;
// any other is one sub-request under the caps. Without one (Obscura's profile, or a pool
// admitting no hops), a tunnel to the page's own host or an admitted hop's carries its
// documents (admitted by the limiter, not sub-requests) and goes on; one to any other host
// is a sub-request. A refused one is counted capped (admitSubrequest).
func (st *renderState) admitTunnel(domain string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if n := st.tunnelCredits[domain]; n > 0 {
		if n == 1 {
			delete(st.tunnelCredits, domain)
		} else {
			st.tunnelCredits[domain] = n - 1
		}
		return true
	}
	if !st.pausedCount && st.ownDomain(domain) {
		return true
	}
	ok := st.admitSubrequestLocked(domain)
	if st.pausedCount {
		// Seen by no event of the page (a WebSocket, a worker's): counted here alone.
		st.tunnelSubCount++
		if !ok {
			st.tunnelRefusedCount++
		}
	}
	return ok
}

// tunnelCounts are the health signal's share of the tunnels: those the proxy counted as
// sub-requests of their own, and of them those refused at a cap. Only with a pauser: the
// page's other requests are in its network events (tracker.counts), these are not.
func (st *renderState) tunnelCounts() (sub, refused int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.tunnelSubCount, st.tunnelRefusedCount
}

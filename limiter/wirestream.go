package limiter

// Sending is Send for a first write the caller does not run itself: an HTTP/2 stream's
// HEADERS frame, which the connection writes on a goroutine of its own, multiplexed with
// other streams' frames on one socket (so no write of the socket can be told to be this
// request's). It waits for the limiter as Send does (WaitWriteAndHold after a connection
// attempt of this admission, else WaitWireAndHold) and holds the domain; the caller calls
// Wrote once the frame was written (httptrace's WroteHeaders). If that never comes (the
// stream failed first), the hold ends at the admission's Done, which counts the write as
// made then: later, never earlier, than it was. A second first write, or one after the
// request ended, is refused; a failed wait uses the write up.
func (g *WireGate) Sending() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.refuseLocked(g.wrote); err != nil {
		return err
	}
	g.wrote = true
	if err := g.waitWrite(); err != nil {
		g.err = err
		return err
	}
	g.held = true
	return nil
}

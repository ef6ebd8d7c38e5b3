package server

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"downloader"
)

// drain is the server's part of a graceful stop: while it drains, the listener stays
// open, /readyz answers 503, new B and C requests are answered shutting_down (SPEC §4)
// without being run, and the requests already in flight finish. Guarded by mu.
type drain struct {
	mu       sync.Mutex
	draining bool
	until    time.Time     // when the grace period ends (zero: unknown)
	active   int           // B and C requests inside their handlers
	idle     chan struct{} // closed once draining and active is 0
}

// enter counts a B or C request in and tells whether the server is draining; the request
// must call leave when its handler returns.
func (s *Server) enter() (leave func(), draining bool) {
	d := &s.drain
	d.mu.Lock()
	d.active++
	draining = d.draining
	d.mu.Unlock()
	return s.leave, draining
}

func (s *Server) leave() {
	d := &s.drain
	d.mu.Lock()
	d.active--
	if d.draining && d.active == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
	d.mu.Unlock()
}

// Drain starts draining and waits until no B or C request is in flight, or until ctx
// ends (the grace period is over), whose error it then returns. graceEnd, on the server's
// clock, is when the grace period ends: refused B requests are told to retry after it.
// Safe to call once.
func (s *Server) Drain(ctx context.Context, graceEnd time.Time) error {
	s.SetReady(false)
	d := &s.drain
	d.mu.Lock()
	d.draining = true
	d.until = graceEnd
	if d.active == 0 {
		d.mu.Unlock()
		return nil
	}
	idle := make(chan struct{})
	d.idle = idle
	d.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isDraining reports whether Drain was called.
func (s *Server) isDraining() bool {
	s.drain.mu.Lock()
	defer s.drain.mu.Unlock()
	return s.drain.draining
}

// refuseRender answers a B request that arrived while draining: 503 with the body of a
// 429 (so a caller reads both alike), retry after the grace period: by then this process
// is gone and its replacement may be up.
func (s *Server) refuseRender(w http.ResponseWriter) {
	s.drain.mu.Lock()
	until := s.drain.until
	s.drain.mu.Unlock()
	n := int64(1)
	if !until.IsZero() {
		n = max(1, int64(math.Ceil(until.Sub(s.cfg.Clock.Now()).Seconds())))
	}
	w.Header().Set("Retry-After", strconv.FormatInt(n, 10))
	writeJSON(w, http.StatusServiceUnavailable, overLimitBody{RetryAfterSeconds: n, FailReason: downloader.FailShuttingDown})
}

// refuseProbe answers a C request that arrived while draining: 200, not reached,
// shutting_down, as the engine answers a stopping service (SPEC §4).
func refuseProbe(w http.ResponseWriter, domain string) {
	sum := downloader.Failed(downloader.FailShuttingDown).Summary(domain)
	sum.HealthSignal = nil
	writeJSON(w, http.StatusOK, sum)
}

// Package origintest runs a real HTTP origin on 127.0.0.1 that serves many virtual hosts
// on one listener and records when each request arrived, per Host, so tests and
// benchmarks can check politeness where it matters: at the origin.
package origintest

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"
)

// Arrival is one request as the origin saw it.
type Arrival struct {
	Host   string
	Path   string
	At     time.Time
	Remote string // the client's address: which connection the request came on
	Proto  string // HTTP/1.1, HTTP/2.0
	// IsHandlerTime: the kernel gave no receive time, and At is when the handler started
	// (late on a loaded machine; counted by UnstampedCount).
	IsHandlerTime bool
}

// Origin is a recording origin server. Safe for concurrent use.
type Origin struct {
	srv *httptest.Server

	mu        sync.Mutex
	arrivals  []Arrival
	unstamped int // arrivals stamped by the handler's clock: the kernel gave no time
}

// UnstampedCount is how many arrivals had no kernel receive time (stamped late, in the
// handler). Politeness checks should see 0.
func (o *Origin) UnstampedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.unstamped
}

// New starts an origin on 127.0.0.1:0 that records every request (at the kernel's receive
// time of its first byte, see kernelstamp.go), then hands it to h
// (nil: a small HTML page naming the host). Close it when done.
func New(h http.Handler) *Origin {
	o := newUnstarted(h)
	o.srv.Start()
	return o
}

// newUnstarted is an origin whose server records and stamps every request before h (nil:
// Page), not started yet.
func newUnstarted(h http.Handler) *Origin {
	if h == nil {
		h = http.HandlerFunc(Page)
	}
	o := &Origin{}
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.record(r)
		h.ServeHTTP(w, r)
	}))
	o.srv.Listener = newStampListener(o.srv.Listener)
	o.srv.Config.ConnContext = withConn
	o.srv.Config.ConnState = connState
	return o
}

// NewTLS is New over TLS with HTTP/2 offered (ALPN h2, then http/1.1), under cert: each
// stream is recorded as a request, stamped like one. The stamp of a request is the
// first byte the connection received after the previous request was done (the origin
// goes idle when its last stream closes), so streams sent one after another are stamped
// as HTTP/1.1 requests are; a stream that arrives while another is open is unstamped
// (UnstampedCount), never stamped early.
func NewTLS(h http.Handler, cert tls.Certificate) *Origin {
	o := newUnstarted(h)
	o.srv.EnableHTTP2 = true
	o.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	o.srv.StartTLS()
	return o
}

// Page answers a small HTML page that names the host.
func Page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><html><head><title>%s</title></head><body><h1>Hello from %s</h1><p>path %s</p></body></html>", r.Host, r.Host, r.URL.Path)
}

func (o *Origin) record(r *http.Request) {
	now, isKernelTime := arrivalTime(r)
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	o.mu.Lock()
	o.arrivals = append(o.arrivals, Arrival{Host: strings.ToLower(host), Path: r.URL.Path, At: now, Remote: r.RemoteAddr, Proto: r.Proto,
		IsHandlerTime: !isKernelTime})
	if !isKernelTime {
		o.unstamped++
	}
	o.mu.Unlock()
}

// Addr is the listener's host:port.
func (o *Origin) Addr() string { return o.srv.Listener.Addr().String() }

// Port is the listener's port.
func (o *Origin) Port() string {
	_, p, _ := net.SplitHostPort(o.Addr())
	return p
}

// ConnectTo is a curl-style rule that sends every host on port 80 to this origin.
func (o *Origin) ConnectTo() string { return "::" + o.Addr() }

// Close shuts the origin down.
func (o *Origin) Close() { o.srv.Close() }

// Arrivals returns a copy of every arrival so far, in order.
func (o *Origin) Arrivals() []Arrival {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Arrival(nil), o.arrivals...)
}

// CountByHost returns how many requests each host received.
func (o *Origin) CountByHost() map[string]int {
	m := map[string]int{}
	for _, a := range o.Arrivals() {
		m[a.Host]++
	}
	return m
}

// Violation is two consecutive requests to one host closer than its interval.
type Violation struct {
	Host     string
	Gap      time.Duration
	Interval time.Duration
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: gap %v < interval %v", v.Host, v.Gap, v.Interval)
}

// Violations returns every pair of consecutive requests to a host whose start-to-start
// gap is below interval(host) - tolerance. Hosts for which interval returns false are
// not checked.
func (o *Origin) Violations(interval func(host string) (time.Duration, bool), tolerance time.Duration) []Violation {
	byHost := map[string][]time.Time{}
	for _, a := range o.Arrivals() {
		byHost[a.Host] = append(byHost[a.Host], a.At)
	}
	var out []Violation
	for h, ts := range byHost {
		iv, ok := interval(h)
		if !ok {
			continue
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		for i := 1; i < len(ts); i++ {
			if gap := ts[i].Sub(ts[i-1]); gap < iv-tolerance {
				out = append(out, Violation{Host: h, Gap: gap, Interval: iv})
			}
		}
	}
	return out
}

// MinGaps returns, per host with two or more requests, the smallest start-to-start gap.
func (o *Origin) MinGaps() map[string]time.Duration {
	byHost := map[string][]time.Time{}
	for _, a := range o.Arrivals() {
		byHost[a.Host] = append(byHost[a.Host], a.At)
	}
	out := map[string]time.Duration{}
	for h, ts := range byHost {
		if len(ts) < 2 {
			continue
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		minGap := time.Duration(1<<63 - 1)
		for i := 1; i < len(ts); i++ {
			minGap = min(minGap, ts[i].Sub(ts[i-1]))
		}
		out[h] = minGap
	}
	return out
}

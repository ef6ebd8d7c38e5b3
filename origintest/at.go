package origintest

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
)

// NewAt is New listening on addr instead of 127.0.0.1:0: an address a test put on the
// loopback interface of a network namespace it made itself ("11.22.33.44:80"), so that a
// URL naming that address reaches the origin with no --connect-to rule. Only a fresh
// namespace may hold such an address (no packet can leave it).
func NewAt(addr string, h http.Handler) (*Origin, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("origintest: listen on %s: %w", addr, err)
	}
	if h == nil {
		h = http.HandlerFunc(Page)
	}
	o := &Origin{}
	o.srv = &httptest.Server{
		Listener: newStampListener(ln),
		Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			o.record(r)
			h.ServeHTTP(w, r)
		})},
	}
	o.srv.Config.ConnContext = withConn
	o.srv.Config.ConnState = connState
	o.srv.Start()
	return o, nil
}

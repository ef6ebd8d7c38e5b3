package origintest

import (
	"fmt"
	"net"
	"time"
)

// Listen returns a TCP listener on 127.0.0.1:0 whose accepted connections record the
// kernel's receive time of their bytes (see kernelstamp.go), for a test origin that
// speaks raw TCP (one that fails in ways an http.Server cannot). Read those times with
// ReceivedAt.
func Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("origintest: listen: %w", err)
	}
	return newStampListener(ln), nil
}

// ReceivedAt returns the kernel receive time of the first byte read from c (accepted from
// a Listen listener) since the last call, and forgets it: the arrival of the request just
// read. ok is false when the kernel gave no time.
func ReceivedAt(c net.Conn) (at time.Time, ok bool) {
	sc, isStamped := c.(*stampConn)
	if !isStamped {
		return time.Time{}, false
	}
	return sc.claim()
}

package netguard

import (
	"errors"
	"syscall"
)

// isLocalRouteError reports whether a dial failed because this machine has no route or
// source address for the address family (an AAAA answer on an IPv4-only host, say): a
// later address's error says more about the origin.
func isLocalRouteError(err error) bool {
	return errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT)
}

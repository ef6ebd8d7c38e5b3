package fetch

import (
	"errors"

	"downloader"
)

// egressCause is the cause an egress proxy's dial error tells (package egressproxy's
// ProxyError and TargetError): the dialer knows whether its proxy failed us or reported
// the target's failure, which the error's errno alone cannot say (a refused connection
// to the proxy is ours, not the origin's).
func egressCause(err error) (downloader.Cause, bool) {
	var e interface{ EgressCause() downloader.Cause }
	if errors.As(err, &e) {
		return e.EgressCause(), true
	}
	return downloader.CauseReported, false
}

package engine

import (
	"time"

	"downloader"
	"downloader/egress"
)

// Cluster returns the cluster view of the shared runtime, or nil on one machine.
func (e *Engine) Cluster() downloader.ClusterView {
	cv, _ := e.cfg.Shared.(downloader.ClusterView)
	return cv
}

// egressStatuser is the egress detector's snapshot (egress.Detector).
type egressStatuser interface {
	Status(now time.Time) egress.Status
}

// Egress returns the egress detector's state at now; ok is false without a detector.
func (e *Engine) Egress(now time.Time) (st downloader.EgressState, ok bool) {
	d, ok := e.cfg.Egress.(egressStatuser)
	if !ok {
		return downloader.EgressState{}, false
	}
	return d.Status(now).EgressState(), true
}

package server

import (
	"net/http"

	"downloader"
)

// Store backends, as the answer of GET /v1/cluster names them.
const (
	storeBackendEmbedded = "embedded"
	storeBackendTiKV     = "tikv"
)

// localInstanceID names the one instance of the embedded store in GET /v1/cluster.
const localInstanceID = "local"

// clusterAnswer is GET /v1/cluster: the instances sharing this instance's store, the
// cluster-wide cap, and this instance's view of its own egress.
type clusterAnswer struct {
	StoreBackend string `json:"store_backend"`
	// InstanceID is the instance that answered.
	InstanceID         string                       `json:"instance_id"`
	MaxConcurrentCount int                          `json:"max_concurrent_count"`
	LiveInstanceCount  int                          `json:"live_instance_count"`
	Instances          []downloader.ClusterInstance `json:"instances"`
	// Egress is the answering instance's egress detector (nil without one).
	Egress *downloader.EgressState `json:"egress"`
}

// handleCluster answers GET /v1/cluster. In cluster mode it lists the instances that sent
// a heartbeat in the last minute, live or not (503 when TiKV cannot be reached); on the
// embedded store it answers the one local instance, so that a client needs no second
// code path.
func (s *Server) handleCluster() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := s.cfg.Clock.Now()
		ans := clusterAnswer{MaxConcurrentCount: s.cfg.Settings.Settings().MaxConcurrentCount}
		if s.cfg.Egress != nil {
			if st, ok := s.cfg.Egress(now); ok {
				ans.Egress = &st
			}
		}
		if cv := s.cfg.Cluster; cv != nil {
			list, err := cv.Instances(r.Context())
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			ans.StoreBackend, ans.InstanceID, ans.Instances = storeBackendTiKV, cv.InstanceID(), list
		} else {
			g := s.cfg.Slots
			ans.StoreBackend, ans.InstanceID = storeBackendEmbedded, localInstanceID
			local := downloader.ClusterInstance{InstanceID: localInstanceID, StartedAt: s.cfg.StartedAt.UTC(), LastHeartbeatAt: now.UTC(),
				ExpiresAt: now.UTC(), IsLive: true, InFlightCount: g.InFlight(), CapacityShareCount: g.Capacity()}
			if a := s.address.Load(); a != nil {
				local.Address = *a
			}
			ans.Instances = []downloader.ClusterInstance{local}
		}
		if ans.Instances == nil {
			ans.Instances = []downloader.ClusterInstance{}
		}
		for _, in := range ans.Instances {
			if in.IsLive {
				ans.LiveInstanceCount++
			}
		}
		writeJSON(w, http.StatusOK, ans)
	})
}

// domainAnswer is GET /v1/domains/{domain}: this instance's limiter entry (its fields at
// the top, as on one machine) and, in cluster mode, the domain's cluster-wide record.
type domainAnswer struct {
	*downloader.DomainState
	Cluster *downloader.ClusterDomain `json:"cluster,omitempty"`
}

// handleDomain answers one domain's downloader:domain_runtime entry: the local limiter's,
// and in cluster mode the shared record beside it. 404 when neither knows the domain.
func (s *Server) handleDomain() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := downloader.CanonicalHost(r.PathValue("domain"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		var ans domainAnswer
		if st, ok := s.cfg.Domains.Domain(s.cfg.Clock.Now(), d); ok {
			ans.DomainState = &st
		}
		if cv := s.cfg.Cluster; cv != nil {
			cd, err := cv.Domain(r.Context(), d)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if cd.IsStored {
				ans.Cluster = &cd
			}
		}
		if ans.DomainState == nil && ans.Cluster == nil {
			s.writeError(w, r, downloader.Errorf(downloader.ENOTFOUND, "domain %q has no runtime state", d))
			return
		}
		writeJSON(w, http.StatusOK, ans)
	})
}

// Package server is the downloader's HTTP face: entries B (POST /v1/render) and C
// (POST /v1/probe), the runtime and settings API, health endpoints, the console's sign-in,
// and the access policy in front of every route (auth.go). routes.go lists the whole API
// on one screen.
package server

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"downloader"
	"downloader/clock"
)

// URLGuard refuses URLs that name a forbidden address directly (package netguard).
type URLGuard interface {
	CheckURLHost(host string) error
}

// Config wires a Server (deps.go). Probe, Render, Settings, Domains and Slots are
// required.
type Config struct {
	Probe    Prober
	Render   Renderer
	Settings SettingsService
	Domains  DomainView
	Slots    SlotView
	// Cluster is the cluster-wide view in cluster mode; nil on the embedded store, where
	// GET /v1/cluster answers the one local instance.
	Cluster ClusterView
	// Egress is the egress detector's state at now; nil (or ok false): no detector.
	Egress func(now time.Time) (st downloader.EgressState, ok bool)

	Guard URLGuard // nil: no literal-address check
	// HeaderPolicy decides which request_headers entries B and C accept.
	HeaderPolicy downloader.HeaderPolicy
	Logger       *slog.Logger
	Clock        clock.Clock
	// APIToken guards entries B and C, task submission and the read API; AdminToken
	// guards settings and console actions (and also opens the API). Empty: not required.
	// See auth.go for the whole policy.
	APIToken   string
	AdminToken string
	// MetricsToken, when set, is the bearer token GET /metrics needs (Prometheus'
	// authorization scrape setting); empty: /metrics is open.
	MetricsToken string
	// Extra registers more routes (tasks, results, console, metrics) from other packages.
	Extra func(mux *http.ServeMux)

	// Tasks is the embedded local queue behind POST /v1/tasks; nil (tasks come from a
	// scheduler) answers 404.
	Tasks TaskQueue
	// Results and Pages back GET /v1/fetch_results and GET /v1/pages/{key}; nil answers 404.
	Results downloader.ResultStore
	Pages   downloader.PageStore

	// StartedAt is when this process started: GET /v1/cluster shows it for the one local
	// instance of the embedded store (in cluster mode the shared instance list has its own).
	StartedAt time.Time
}

// Server is an http.Handler. Safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	handler http.Handler
	ready   atomic.Bool
	address atomic.Pointer[string] // SetAddress
	drain   drain                  // drain.go
}

// New returns the server's handler; it answers /readyz with 503 until SetReady(true).
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	mux := http.NewServeMux()
	s.routes(mux)
	if cfg.Extra != nil {
		cfg.Extra(mux)
	}
	s.handler = s.recoverPanics(s.authorize(jsonMuxErrors(mux)))
	return s
}

// SetReady sets what /readyz answers.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// SetAddress sets the address GET /v1/cluster shows for the local instance of the
// embedded store, once the listener has its port.
func (s *Server) SetAddress(addr string) { s.address.Store(&addr) }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// recoverPanics turns a handler panic into a 500 whose detail is only in the log.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", v)
				writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal error"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

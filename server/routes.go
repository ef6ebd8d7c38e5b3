package server

import "net/http"

// routes lists the whole API.
func (s *Server) routes(mux *http.ServeMux) {
	mux.Handle("POST /v1/probe", s.handleProbe())   // entry C
	mux.Handle("POST /v1/render", s.handleRender()) // entry B

	mux.Handle("POST /v1/tasks", s.handleSubmitTasks())         // entry A: feed the local queue
	mux.Handle("GET /v1/tasks", s.handleListTasks())            // the local queue's tasks, by state
	mux.Handle("GET /v1/tasks/{task_id}", s.handleTaskStatus()) // one task's state and attempts
	mux.Handle("GET /v1/fetch_results", s.handleFetchResults()) // downloader:fetch_result
	mux.Handle("GET /v1/pages/{key}", s.handlePage())           // the page store (网页库)

	mux.Handle("GET /v1/domains/{domain}", s.handleDomain()) // local and cluster-wide (cluster.go)
	mux.Handle("GET /v1/cluster", s.handleCluster())         // the instances sharing the store
	mux.Handle("GET /v1/settings", s.handleGetSettings())
	mux.Handle("PUT /v1/settings", s.handlePutSettings())

	mux.Handle("GET /signin", s.handleSignInPage()) // the console's sign-in (signin.go)
	mux.Handle("POST /signin", s.handleSignIn())
	mux.Handle("POST /signout", s.handleSignOut())

	mux.Handle("GET /healthz", s.handleHealthz())
	mux.Handle("GET /readyz", s.handleReadyz())
}

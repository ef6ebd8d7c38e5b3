package limiter

import "context"

// HopAdmitter admits the redirect hops of one request (and a render's later main-frame
// documents): SPEC §2, no request leaves the process without its host's admission,
// redirect hops included. The caller of a fetch or render builds one per request and
// passes it (fetch.Fetcher.Fetch, render.Pool.RenderInSlot), so that what a hop's
// admission needs of its request (the entry, in cluster mode the shared tickets that end
// with it) travels in the call, not in the context. Implementations are safe for
// concurrent use.
type HopAdmitter interface {
	// AdmitHop blocks until a request to domain is admitted (reserve-and-wait bounded by
	// ctx, whose deadline it honours), and returns the admission.
	AdmitHop(ctx context.Context, domain string) (Admission, error)
}

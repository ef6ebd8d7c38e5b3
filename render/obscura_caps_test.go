package render

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// tunnelPages: a page on start.example.com (HTTPS) that asks each of three other hosts
// for tunnelBurst scripts over HTTPS at once. They are async script elements, which hold
// the load event until each has loaded or failed, so the render (which Obscura's profile
// ends at the load) reads the page only after every one was sent or refused, however
// slowly a loaded machine runs it.
const tunnelBurst = 8

func tunnelPages(w http.ResponseWriter, r *http.Request) {
	switch {
	case hostOf(r) == "start" && r.URL.Path == "/tunnels":
		var tags strings.Builder
		for _, h := range []string{"cdn1", "cdn2", "cdn3"} {
			for i := range tunnelBurst {
				fmt.Fprintf(&tags, "<script async src=\"https://%s.example.com/api/%d.js\"></script>", h, i)
			}
		}
		htmlPage(w, "<p>A page of many hosts.</p>"+tags.String())
	case strings.HasPrefix(hostOf(r), "cdn") && strings.HasPrefix(r.URL.Path, "/api/"):
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `void 0;`)
	default:
		http.NotFound(w, r)
	}
}

// TestObscuraTunnelCaps: on Obscura's profile, a page's HTTPS sub-requests to other
// hosts reach our proxy as CONNECTs only, so the caps (--render-max-subrequest-count,
// --render-max-host-subrequest-count) bound the tunnels: counted at the origins, no host
// got more connections than the per-host cap, all of them together no more than the
// render's cap, and capped_subrequest_count counts the tunnels refused. Requests inside
// one tunnel are not counted one by one (docs/renderers.md).
func TestObscuraTunnelCaps(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	const perHost, total = 2, 5
	o := newExampleOrigin(t, tunnelPages)
	p, _ := newExamplePool(t, o, func(c *Config) {
		c.MaxHostSubrequestCount = perHost
		c.MaxSubrequestCount = total
	})
	out := p.Render(context.Background(), getFixture(t).url("https://start.example.com/tunnels"), nil, safetyTimeout(t))
	checkCause(t, out)
	if out.FailReason != "" || out.HTTPStatus != 200 {
		t.Fatalf("fail_reason=%s http_status=%d", failReason(out), out.HTTPStatus)
	}
	conns, reqs := 0, 0
	for _, h := range []string{"cdn1", "cdn2", "cdn3"} {
		hits := o.requests(h + ".example.com")
		remotes := map[string]bool{}
		for _, r := range hits {
			remotes[r.remote] = true
		}
		if len(remotes) > perHost {
			t.Errorf("%s: %d connections reached the origin, over the per-host cap %d", h, len(remotes), perHost)
		}
		conns += len(remotes)
		reqs += len(hits)
	}
	if conns > total || conns == 0 {
		t.Errorf("%d connections to the other hosts in all, want 1..%d", conns, total)
	}
	capped := deref(out.HealthSignal.CappedSubrequestCount)
	if capped < 1 {
		t.Errorf("capped_subrequest_count=%d, want the refused tunnels counted", capped)
	}
	// Each fetch either got a tunnel (reaching the origin, on a connection of its own or a
	// reused one) or was refused at the cap: none went out uncounted. (The browser may try a
	// refused CONNECT once more, which is refused and counted again: at least, not exactly.)
	if reqs > 3*tunnelBurst || reqs+capped < 3*tunnelBurst {
		t.Errorf("%d requests reached the other hosts and %d were capped, want %d in all", reqs, capped, 3*tunnelBurst)
	}
	t.Logf("other hosts: %d connections carrying %d of %d requests; capped_subrequest_count=%d",
		conns, reqs, 3*tunnelBurst, capped)
	getFixture(t).noViolations(t)
}

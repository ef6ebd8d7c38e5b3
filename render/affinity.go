package render

import (
	"time"
)

// Site affinity (IsolationWipe): a long-lived context keeps its HTTP cache and code cache
// across renders, keyed by top-level site, so a site's next page is cheap only in the
// context that rendered the site before. When that context is serving another render or
// being wiped, the render waits for it rather than take a free tab of another context
// (whose cache has never seen the site), up to maxAffinityWait and a tenth of its
// timeout; the wait holds the render's slot, which on a busy machine costs nothing (the
// free tab's work would only share the same cores), and past the bound it takes any free
// tab. A free tab for a site no context has seen is one whose sites no waiting render
// needs, so that it is not taken from under a render waiting for it. Isolation is
// untouched: every tab is wiped before it serves again, whichever render it serves.

// maxAffinityWait bounds a render's wait for its site's context: about one TodoMVC render
// and a wipe on two loaded cores (docs/benchmarks.md).
const maxAffinityWait = 3 * time.Second

// affinityUntil is until when the render may wait for its site's context: zero (no
// wait) where contexts are not long-lived.
func (j *renderJob) affinityUntil(b *browser) time.Time {
	if !j.p.isWipe(b) {
		return time.Time{}
	}
	wait := j.p.cfg.affinityWait
	if wait == 0 {
		wait = maxAffinityWait
	}
	return j.start.Add(min(wait, j.deadline.Sub(j.start)/10))
}

// siteHeldLocked reports whether a long-lived context that rendered site serves a render
// now or is being wiped, and will serve again after it (it is not at its
// MaxContextRenders). Requires p.mu held.
func (p *Pool) siteHeldLocked(site string) bool {
	for _, t := range p.busy {
		if t.sc.sites[site] && t.sc.renders+1 < p.cfg.MaxContextRenders {
			return true
		}
	}
	for _, t := range p.wiping {
		if t.sc.sites[site] && t.sc.renders < p.cfg.MaxContextRenders {
			return true
		}
	}
	return false
}

// coldPickLocked is the spare for a render whose site no free context has seen: the first
// whose context holds no site a waiting render needs, else the first. Requires p.mu held
// and a spare.
func (p *Pool) coldPickLocked() int {
	if len(p.awaited) == 0 {
		return 0
	}
	for i, s := range p.spares {
		if s.sc == nil {
			return i
		}
		wanted := false
		for site := range p.awaited {
			if s.sc.sites[site] {
				wanted = true
				break
			}
		}
		if !wanted {
			return i
		}
	}
	return 0
}

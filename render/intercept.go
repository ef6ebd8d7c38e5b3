package render

import (
	"context"
	"slices"
	"sync"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"downloader"
)

// What a render does not download (SPEC §3, skip_resource_types). A request of a skipped
// type is failed in the browser before it is sent, as blocked by the client: it never
// reaches our proxy or the origin, and it is counted in skipped_request_count (not in
// subrequest_count, capped_subrequest_count or blocked_request_count). When the pool
// admits hops, the tab's pauser pauses documents, https requests and the skipped types
// (pausePatterns), and a tab has one set of Fetch patterns (a second Fetch.enable replaces
// the first's): skipping is then one of the pauser's decisions (hops.go), for the render's
// own set, whose patterns the tab takes when the set changes. Without a pauser
// (Config.ShouldAdmitHops false: tests, benchmarks) the browser pauses only the requests of the
// skipped types (one pattern per type) and the skipper fails each at once, so a request
// of any other type costs no protocol round trip. Network.setBlockedURLs, the mechanism
// without a round trip, matches URLs only, and a URL does not say what a request is for.
// docs/benchmarks.md has the measurement.

// cdpResourceTypes maps our resource type names to the browser's.
var cdpResourceTypes = map[downloader.ResourceType]network.ResourceType{
	downloader.ResourceStylesheet:  network.ResourceTypeStylesheet,
	downloader.ResourceImage:       network.ResourceTypeImage,
	downloader.ResourceMedia:       network.ResourceTypeMedia,
	downloader.ResourceFont:        network.ResourceTypeFont,
	downloader.ResourceScript:      network.ResourceTypeScript,
	downloader.ResourceTextTrack:   network.ResourceTypeTextTrack,
	downloader.ResourceXHR:         network.ResourceTypeXHR,
	downloader.ResourceFetch:       network.ResourceTypeFetch,
	downloader.ResourcePrefetch:    network.ResourceTypePrefetch,
	downloader.ResourceEventSource: network.ResourceTypeEventSource,
	downloader.ResourceManifest:    network.ResourceTypeManifest,
	downloader.ResourcePing:        network.ResourceTypePing,
	downloader.ResourceOther:       network.ResourceTypeOther,
}

// skipSet is a sorted, duplicate-free list of the browser's resource types to skip.
type skipSet []network.ResourceType

func newSkipSet(types []downloader.ResourceType) skipSet {
	var s skipSet
	for _, t := range types {
		if c, ok := cdpResourceTypes[t]; ok && !slices.Contains(s, c) {
			s = append(s, c)
		}
	}
	slices.Sort(s)
	return s
}

// has reports whether requests of type t are skipped.
func (s skipSet) has(t network.ResourceType) bool {
	return slices.Contains(s, t)
}

// fetchPatterns are the Fetch.enable patterns of a tab: what its pauser decides on
// (pausePatterns: documents, https requests, skipped types), else its skipped types.
func fetchPatterns(skip skipSet, withPauser bool) []*fetch.RequestPattern {
	if withPauser {
		return pausePatterns(skip)
	}
	var out []*fetch.RequestPattern
	for _, t := range skip {
		out = append(out, typePattern(t)...)
	}
	return out
}

// typePattern is the Fetch pattern of the requests of type t; none for Prefetch, which
// Chromium's filter refuses ("Unknown resource type in fetch filter"): a prefetch is
// caught where every request is paused (https://, hops.go) and, over plain http, refused
// by the proxy from its Sec-Purpose header; the local browser's flags turn prefetching off.
func typePattern(t network.ResourceType) []*fetch.RequestPattern {
	if t == network.ResourceTypePrefetch {
		return nil
	}
	return []*fetch.RequestPattern{{URLPattern: "*", ResourceType: t, RequestStage: fetch.RequestStageRequest}}
}

// skipper fails a pauser-less tab's paused requests (all of skipped types) and tells the
// tab's current tracker which they were. add runs on the tab's event loop and only queues; run answers
// on its own goroutine. Safe for concurrent use.
type skipper struct {
	t     *tab
	mu    sync.Mutex
	queue []*fetch.EventRequestPaused
	wake  chan struct{}
}

func newSkipper(t *tab) *skipper {
	return &skipper{t: t, wake: make(chan struct{}, 1)}
}

func (s *skipper) add(e *fetch.EventRequestPaused) {
	if u := s.t.cur.Load(); u != nil && e.NetworkID != "" {
		u.tr.markSkipped(e.NetworkID)
	}
	s.mu.Lock()
	s.queue = append(s.queue, e)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run fails the queued requests until the tab's context ends.
func (s *skipper) run(tctx context.Context) {
	for {
		s.mu.Lock()
		q := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, e := range q {
			chromedp.Call(tctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: e.RequestID, ErrorReason: network.ErrorReasonBlockedByClient})
		}
		select {
		case <-s.wake:
		case <-tctx.Done():
			return
		}
	}
}

// pausedRouter is the tab's listener for the current use's pauser (paused requests, the
// page's attempts to open windows): with no pauser, a paused request was paused only
// because its type is skipped.
func (t *tab) pausedRouter(ev any) {
	if u := t.cur.Load(); u != nil && u.pause != nil {
		u.pause.onEvent(ev)
		return
	}
	if e, ok := ev.(*fetch.EventRequestPaused); ok {
		t.skip.add(e)
	}
}

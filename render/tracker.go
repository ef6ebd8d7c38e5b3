package render

import (
	"net/url"
	"strings"
	"sync"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/inspector"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"

	"downloader"
)

// tracker follows a tab's network and page events: requests in flight (for network idle),
// the main document, the load events and crashes. Its onEvent runs on the tab's event
// loop, in the order the browser sent the events, so it only records and never blocks.
// Safe for concurrent use.
type tracker struct {
	mu        sync.Mutex
	armed     bool // events before the render starts (the blank tab's own) are ignored
	mainFrame cdp.FrameID
	token     string // the proxy's mark on the answers it made up itself
	reqs      map[network.RequestID]*request
	inflight  int
	activity  uint64            // bumped whenever a request starts or ends
	mainReq   network.RequestID // the main frame's latest document request
	committed string            // URL the main frame last committed
	domReady  bool              // DOMContentLoaded of the current main document
	loaded    bool              // load event of the current main document
	crashed   bool
	awaitMain bool                       // a reload was asked for: the page is not loaded until its request starts
	skipped   map[network.RequestID]bool // requests failed because their type is skipped
	// otherScheme holds the status of a redirect a request was answered with whose
	// Location is not an http(s) URL (otherSchemeRedirect); the browser does not follow it.
	otherScheme map[network.RequestID]int64
	crash       chan struct{} // closed at the first crash
	notify      chan struct{} // signalled (never blocking) after every change
}

// request is what the tracker knows of one request.
type request struct {
	url        string
	hops       []string // the URLs before url, when it was redirected
	typ        network.ResourceType
	isMain     bool
	status     int64
	mime       string
	headers    network.Headers
	redirects  int
	inflight   bool
	finished   bool
	failed     bool
	errorText  string
	proxyCause downloader.Cause // set when the answer came from our proxy (CauseReported: the origin's)
	fromCache  bool             // the browser answered it from its HTTP cache
}

func newTracker() *tracker {
	return &tracker{reqs: make(map[network.RequestID]*request), skipped: make(map[network.RequestID]bool), otherScheme: make(map[network.RequestID]int64), crash: make(chan struct{}), notify: make(chan struct{}, 1)}
}

// crashedCh is closed when the tab's renderer crashes or the inspector detaches.
func (tr *tracker) crashedCh() <-chan struct{} { return tr.crash }

func (tr *tracker) setMainFrame(id cdp.FrameID) {
	tr.mu.Lock()
	tr.mainFrame = id
	tr.mu.Unlock()
}

// arm starts recording, for the render whose proxy marks its own answers with token.
func (tr *tracker) arm(token string) {
	tr.mu.Lock()
	tr.armed = true
	tr.token = token
	tr.mu.Unlock()
}

func (tr *tracker) signal() {
	select {
	case tr.notify <- struct{}{}:
	default:
	}
}

func isHTTP(u string) bool {
	return strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")
}

// onEvent is the tab's listener.
func (tr *tracker) onEvent(ev any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	switch ev.(type) {
	case *inspector.EventTargetCrashed, *inspector.EventDetached:
		if !tr.crashed {
			tr.crashed = true
			close(tr.crash)
		}
	}
	if !tr.armed {
		if tr.crashed {
			tr.signal()
		}
		return
	}
	switch ev := ev.(type) {
	case *network.EventResponseReceivedExtraInfo:
		// The raw answer of every hop, redirects included (a redirect the browser refuses
		// to follow has no other event with its status). It may come before or after the
		// request's own events: kept by request id, read by main().
		if otherSchemeRedirect(ev.StatusCode, header(ev.Headers, "Location")) {
			tr.otherScheme[ev.RequestID] = ev.StatusCode
		}
		return
	case *network.EventRequestWillBeSent:
		if ev.Request == nil || !isHTTP(ev.Request.URL) {
			return
		}
		if r := tr.reqs[ev.RequestID]; r != nil { // a redirect: same request, next hop
			if ev.RedirectResponse != nil {
				r.redirects++
			}
			r.hops = append(r.hops, r.url)
			r.url = ev.Request.URL
			return
		}
		r := &request{url: ev.Request.URL, typ: ev.Type}
		r.isMain = ev.Type == network.ResourceTypeDocument && ev.FrameID == tr.mainFrame
		if r.isMain {
			tr.mainReq = ev.RequestID
			tr.domReady, tr.loaded = false, false
		}
		// An event stream never ends by design; it does not keep the page busy.
		if ev.Type != network.ResourceTypeEventSource {
			r.inflight = true
			tr.inflight++
		}
		tr.reqs[ev.RequestID] = r
		tr.activity++
	case *network.EventResponseReceived:
		r := tr.reqs[ev.RequestID]
		if r == nil || ev.Response == nil {
			return
		}
		r.status = ev.Response.Status
		r.mime = ev.Response.MimeType
		r.headers = ev.Response.Headers
		r.proxyCause = proxyCauseOf(r.headers, tr.token)
		r.fromCache = ev.Response.FromDiskCache || ev.Response.FromPrefetchCache
	case *network.EventLoadingFinished:
		tr.end(ev.RequestID, false, "")
	case *network.EventLoadingFailed:
		tr.end(ev.RequestID, true, ev.ErrorText)
	case *page.EventFrameNavigated:
		if ev.Frame != nil && ev.Frame.ParentID == "" {
			tr.committed = ev.Frame.URL + ev.Frame.URLFragment
			if tr.awaitMain {
				// The reloaded document committed: the old one's events are over.
				tr.awaitMain = false
				tr.domReady, tr.loaded = false, false
			}
		}
	case *page.EventNavigatedWithinDocument:
		if ev.FrameID == tr.mainFrame {
			tr.committed = ev.URL
		}
	case *page.EventDomContentEventFired:
		tr.domReady = true
	case *page.EventLoadEventFired:
		tr.domReady, tr.loaded = true, true
	default:
		if !tr.crashed {
			return
		}
	}
	tr.signal()
}

// end records the end of a request. Requires tr.mu held.
func (tr *tracker) end(id network.RequestID, failed bool, errorText string) {
	r := tr.reqs[id]
	if r == nil || r.finished || r.failed {
		return
	}
	r.finished = !failed
	r.failed = failed
	r.errorText = errorText
	if r.inflight {
		r.inflight = false
		tr.inflight--
	}
	tr.activity++
}

// pageState is a snapshot of what the render loop waits on.
type pageState struct {
	domReady, loaded, crashed bool
	inflight                  int
	activity                  uint64
}

func (tr *tracker) state() pageState {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return pageState{domReady: tr.domReady && !tr.awaitMain, loaded: tr.loaded && !tr.awaitMain, crashed: tr.crashed, inflight: tr.inflight, activity: tr.activity}
}

// expectNewMain makes the page count as not loaded until the main frame commits its next
// document (a reload was asked for; the old document's events may still come).
func (tr *tracker) expectNewMain() {
	tr.mu.Lock()
	tr.awaitMain = true
	tr.mu.Unlock()
}

// mainDocument is what the outcome needs of the main document.
type mainDocument struct {
	id         network.RequestID
	found      bool
	url        string
	committed  string
	status     int64
	mime       string
	headers    network.Headers
	redirects  int
	failed     bool
	errorText  string
	proxyCause downloader.Cause // our proxy's answer (CauseReported: the origin's)
	fromCache  bool
	// otherSchemeStatus is the status of a redirect to a URL of a scheme the browser
	// does not fetch (view-source:, javascript:, ftp:, file:, data:, ...); 0: none.
	otherSchemeStatus int64
}

func (tr *tracker) main() mainDocument {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	r := tr.reqs[tr.mainReq]
	if r == nil {
		return mainDocument{committed: tr.committed}
	}
	return mainDocument{
		id: tr.mainReq, found: true, url: r.url, committed: tr.committed,
		status: r.status, mime: r.mime, headers: r.headers, redirects: r.redirects,
		failed: r.failed, errorText: r.errorText, proxyCause: r.proxyCause, fromCache: r.fromCache,
		otherSchemeStatus: tr.otherScheme[tr.mainReq],
	}
}

// markSkipped records that the request id was not made because its type is skipped.
func (tr *tracker) markSkipped(id network.RequestID) {
	tr.mu.Lock()
	tr.skipped[id] = true
	tr.mu.Unlock()
}

// counts are the sub-request items of the health signal.
type counts struct {
	xhr, xhrFailed, sub, subFailed, skipped int
}

// counts counts every request but the main frame's documents and the skipped ones, which
// are counted apart. A request failed when it failed on the network (not when the page
// cancelled it), when our proxy answered it, or when its HTTP status is 400 or more.
func (tr *tracker) counts() counts {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	c := counts{skipped: len(tr.skipped)}
	for id, r := range tr.reqs {
		if r.isMain || tr.skipped[id] {
			continue
		}
		failed := (r.failed && r.errorText != "net::ERR_ABORTED") || r.proxyCause.IsFailure() || r.status >= 400
		c.sub++
		if failed {
			c.subFailed++
		}
		if r.typ == network.ResourceTypeXHR || r.typ == network.ResourceTypeFetch {
			c.xhr++
			if failed {
				c.xhrFailed++
			}
		}
	}
	return c
}

// header returns the value of a response header, whatever its case.
func header(h network.Headers, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			if s, ok := v.(string); ok {
				return s
			}
		}
	}
	return ""
}

// otherSchemeRedirect reports whether an answer is a redirect (3xx with a Location) to
// something that is not an http(s) URL: a scheme no render fetches, or no URL at all.
// A relative Location keeps the request's scheme. SPEC §4: the origin's bad answer, as a
// plain fetch, which does not follow it either, says of the same answer.
func otherSchemeRedirect(status int64, location string) bool {
	if !isRedirect(int(status)) || location == "" {
		return false
	}
	u, err := url.Parse(strings.TrimSpace(location))
	if err != nil {
		return true
	}
	return u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https"
}

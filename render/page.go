package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"downloader"
	"downloader/clock"
	"downloader/fetch"
	"downloader/htmltext"
	"downloader/render/renderproxy"
	"downloader/retryafter"
)

// maxReadReserve is the most of a render's timeout kept for reading the page.
const maxReadReserve = time.Second

// maxRenderedHTMLBytes caps the rendered HTML read from the DOM: the cap of a plain
// fetch's body, so that a page that builds hundreds of megabytes of DOM costs us no more
// than one that serves them.
const maxRenderedHTMLBytes = fetch.DefaultMaxBodyBytes

// renderedHTMLExpr reads the rendered document, its doctype and its root element, at most
// capUnits+1 UTF-16 code units of it (one more than the cap says "there was more"; the
// caller cuts to bytes). outerHTML is the fast path; a document too large for one string
// (V8 throws RangeError past ~2^29 characters), or any document when walk is set (tests),
// is serialised node by node and stops at the cap, so the browser never builds more.
func renderedHTMLExpr(capUnits int64, walk bool) string {
	return `((cap, walk) => {
  const d = document.documentElement;
  if (!d) return "";
  const doctype = document.doctype ? new XMLSerializer().serializeToString(document.doctype) : "";
  if (!walk) {
    try {
      const s = doctype + d.outerHTML;
      return s.length > cap ? s.slice(0, cap + 1) : s;
    } catch (e) { /* too large for one string: walk it */ }
  }
  const parts = [];
  let n = 0;
  const put = (s) => {
    if (n + s.length > cap + 1) s = s.slice(0, cap + 1 - n);
    parts.push(s);
    n += s.length;
  };
  const left = () => cap + 1 - n;
  const rawText = new Set(["style", "script", "xmp", "iframe", "noembed", "noframes", "plaintext", "noscript"]);
  const escText = (s) => s.replace(/&/g, "&amp;").replace(/\u00a0/g, "&nbsp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const tag = (el) => {
    try {
      const h = el.cloneNode(false).outerHTML;
      const close = "</" + el.localName + ">";
      return h.endsWith(close) ? [h.slice(0, h.length - close.length), close] : [h, ""];
    } catch (e) { // an attribute too large to serialise
      return ["<" + el.localName + ">", "</" + el.localName + ">"];
    }
  };
  put(doctype);
  const open = []; // the elements entered and not yet closed, with their end tags
  let node = d;
  while (n <= cap) {
    if (node) {
      if (node.nodeType === 1) {
        const [o, c] = tag(node);
        put(o);
        open.push([node, c]);
        node = node.localName === "template" && node.content ? node.content.firstChild : node.firstChild;
        continue;
      }
      const parent = open.length ? open[open.length - 1][0] : null;
      switch (node.nodeType) {
      case 3:
        const t = node.data.slice(0, left());
        put(parent && parent.namespaceURI === "http://www.w3.org/1999/xhtml" && rawText.has(parent.localName) ? t : escText(t));
        break;
      case 8:
        put("<!--" + node.data.slice(0, left()) + "-->");
        break;
      case 7:
        put("<?" + node.target + " " + node.data.slice(0, left()) + ">");
        break;
      }
      node = node.nextSibling;
      continue;
    }
    const top = open.pop();
    if (!top) break;
    put(top[1]);
    if (top[0] === d) break;
    node = top[0].nextSibling;
  }
  return parts.join("");
})(` + strconv.FormatInt(capUnits, 10) + `, ` + strconv.FormatBool(walk) + `)`
}

// renderedTextExpr reads the text a reader sees on the rendered page, as the browser itself
// lays it out: the root element's innerText, which leaves out whatever is not rendered
// (display:none, the hidden attribute, visibility:hidden, <template> content, <script>,
// <style>, <noscript> with scripting on, the head and its <title>). A document whose root
// has no innerText (an XML document) gives its textContent. At most capUnits+1 UTF-16
// code units are returned, as renderedHTMLExpr does.
func renderedTextExpr(capUnits int64) string {
	return `((cap) => {
  const d = document.documentElement;
  if (!d) return "";
  const s = typeof d.innerText === "string" ? d.innerText : (d.textContent || "");
  return s.length > cap ? s.slice(0, cap + 1) : s;
})(` + strconv.FormatInt(capUnits, 10) + `)`
}

// renderedExpr reads both the rendered HTML and its text in one round trip.
func renderedExpr(capUnits int64) string {
	return `({html: ` + renderedHTMLExpr(capUnits, false) + `, text: ` + renderedTextExpr(capUnits) + `})`
}

// renderedPage is what renderedExpr returns.
type renderedPage struct {
	HTML string `json:"html"`
	Text string `json:"text"`
}

// collapseSpace is text with its white-space runs (Unicode White_Space, as htmltext counts
// them) turned into one space, leading and trailing white space dropped: the rule that
// raw_text_length follows, so that text_length and raw_text_length stay comparable (the
// innerText's line breaks count as the one space a block boundary is in htmltext).
func collapseSpace(text string) string {
	var sb strings.Builder
	sb.Grow(len(text))
	pending := false
	for _, r := range text {
		if unicode.In(r, unicode.White_Space) {
			pending = sb.Len() > 0
			continue
		}
		if pending {
			sb.WriteByte(' ')
			pending = false
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// capHTML cuts s to at most maxBytes, at a character boundary, and reports whether it cut.
func capHTML(s string, maxBytes int) (string, bool) {
	if len(s) <= maxBytes {
		return s, false
	}
	i := maxBytes
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i], true
}

// renderJob is one render in its own goroutine, so that Render can return at its timeout
// while the job cleans up behind it.
type renderJob struct {
	p        *Pool
	u        *url.URL
	st       *renderState
	start    time.Time
	deadline time.Time
	skip     skipSet                   // the resource types not loaded
	hops     HopAdmitter               // admits the render's later main documents; nil: none is
	headers  downloader.RequestHeaders // sent with the main documents (the pauser's; none without one)
	done     chan *downloader.Outcome  // buffered: the job never blocks on it
}

func (j *renderJob) run(ctx context.Context) {
	p := j.p
	var t *tab
	site := "" // the domain rendered, once the tab served it
	defer func() {
		if t != nil {
			p.release(t, site)
		}
	}()
	b, err := p.browserFor(ctx)
	if err != nil {
		var ue *errUnavailable
		switch {
		case errors.As(err, &ue):
			j.done <- downloader.FailedBy(downloader.CauseRendererUnavailable)
		default:
			j.done <- downloader.FailedBy(stopCause(ctx))
		}
		return
	}
	t, err = p.takeTab(ctx, b, j.st.domain, j.affinityUntil(b))
	if err != nil {
		t = nil
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			j.done <- downloader.FailedBy(stopCause(ctx))
		case !b.alive():
			j.done <- downloader.FailedBy(downloader.CauseRendererCrashed)
		default:
			p.log.Warn("render: no tab", "error", err)
			j.done <- downloader.FailedBy(downloader.CauseRendererUnavailable)
		}
		return
	}
	site = j.st.domain
	out := j.renderIn(ctx, t)
	if t.sc != nil {
		// Before Render returns: the caller's next render must find the tab being wiped
		// (and wait for it), not start another.
		p.release(t, site)
		t = nil
	}
	p.refill()
	p.mu.Lock()
	p.rendered++
	p.mu.Unlock()
	j.done <- out
}

func (j *renderJob) renderIn(ctx context.Context, t *tab) *downloader.Outcome {
	out := j.renderTab(ctx, t)
	if j.st.hopRefused() {
		// A main document hop was not admitted in time: whatever the browser made of
		// the failed request, the render is our own limiter's refusal.
		return downloader.FailedBy(downloader.CauseHopRefused)
	}
	return out
}

// softDeadline is when the page is read as it is (wait): the last fifth of the timeout,
// at most maxReadReserve, is kept for reading.
func (j *renderJob) softDeadline() time.Time {
	return j.deadline.Add(-min(maxReadReserve, j.deadline.Sub(j.start)/5))
}

func (j *renderJob) renderTab(ctx context.Context, t *tab) *downloader.Outcome {
	t.proxy.Arm(j.p.proxied(j.st))
	t.tr.arm(t.proxy.Token())

	// runCtx carries the tab (chromedp finds its target in it) and ends with the render,
	// or at once when the browser or the tab dies.
	runCtx, stopRun := context.WithCancelCause(t.ctx)
	defer stopRun(nil)
	hr := &hopRender{ctx: ctx, hops: j.hops, soft: j.softDeadline(), st: j.st, skip: j.skip, tr: t.tr, headers: j.headers,
		refuse: func() { stopRun(errHopRefused) }}
	if t.pause != nil {
		t.pause.arm(hr)
	} else if t.b.prof.interception == interceptProxy {
		j.st.skipAtProxy(j.skip)
		if j.hops != nil {
			j.st.setProxyHops(&proxyHops{r: hr, log: j.p.log})
		}
	}
	stop := context.AfterFunc(ctx, func() { stopRun(context.Cause(ctx)) })
	defer stop()
	watchDone := make(chan struct{})
	defer func() { <-watchDone }()
	defer stopRun(nil)
	go func() {
		defer close(watchDone)
		select {
		case <-t.b.lost:
			stopRun(errCrashed)
		case <-t.connLost():
			stopRun(errCrashed)
		case <-t.detached:
			stopRun(errCrashed)
		case <-t.tr.crashedCh():
			stopRun(errCrashed)
		case <-runCtx.Done():
		}
	}()

	if err := t.setSkip(runCtx, j.skip); err != nil {
		return downloader.FailedBy(j.stopped(runCtx, t, err))
	}
	// The main document is always the origin's (SPEC §3), while a long-lived context keeps
	// its HTTP cache (IsolationWipe): the cache holds only what the context's earlier
	// renders requested, so when this URL is among them, this render goes without the
	// cache (its bundles too: the same URL twice in one context is rare).
	if t.sc != nil && t.sc.hasRequested(j.u.String()) {
		if err := t.setCacheDisabled(runCtx, true); err != nil {
			return downloader.FailedBy(j.stopped(runCtx, t, err))
		}
	}
	navURL := j.u.String()
	if t.b.prof.resolveRedirects {
		var out *downloader.Outcome
		if navURL, out = j.resolveChain(runCtx, t); out != nil {
			return out
		}
	}
	nav, err := chromedp.Call(runCtx, navigateWaitUntil, navigateParams{URL: navURL, WaitUntil: t.b.prof.waitUntil})
	if err != nil {
		if msg, ok := navigationCDPError(err); ok && t.b.prof.navigationErrorIsOrigin && runCtx.Err() == nil {
			return j.navigationRefused(t, msg)
		}
		return downloader.FailedBy(j.stopped(runCtx, t, err))
	}
	if nav.ErrorText != "" || nav.IsDownload {
		return j.navigationFailed(runCtx, t, nav)
	}
	if t.tr.main().fromCache {
		// Still from the cache: a redirect led to a URL an earlier render requested. Load
		// the page again without the cache, once the cached document is in place (the tab
		// is between two documents until then).
		j.p.log.Debug("render: main document came from the cache; loading it again from the origin", "url", j.u.Redacted())
		if err := j.waitDOM(runCtx, t); err != nil {
			return downloader.FailedBy(j.stopped(runCtx, t, err))
		}
		if err := t.setCacheDisabled(runCtx, true); err != nil {
			return downloader.FailedBy(j.stopped(runCtx, t, err))
		}
		t.tr.expectNewMain()
		if nav, err = chromedp.Call(runCtx, page.Navigate, page.NavigateParams{URL: j.u.String()}); err != nil {
			return downloader.FailedBy(j.stopped(runCtx, t, fmt.Errorf("load again: %w", err)))
		}
		if nav.ErrorText != "" || nav.IsDownload {
			return j.navigationFailed(runCtx, t, nav)
		}
	}
	if err := j.wait(runCtx, t); err != nil {
		return downloader.FailedBy(j.stopped(runCtx, t, err))
	}
	return j.read(runCtx, t)
}

// waitDOM waits for the main document's DOMContentLoaded.
func (j *renderJob) waitDOM(ctx context.Context, t *tab) error {
	for !t.tr.state().domReady {
		select {
		case <-t.tr.notify:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// stopped is the cause of a render that could not go on because of err.
func (j *renderJob) stopped(runCtx context.Context, t *tab, err error) downloader.Cause {
	cause := context.Cause(runCtx)
	switch {
	case errors.Is(cause, errCrashed):
		return downloader.CauseRendererCrashed
	case errors.Is(cause, errRenderTimeout), errors.Is(cause, context.DeadlineExceeded):
		return downloader.CauseRenderTimeout
	case errors.Is(cause, errPoolClosed), j.p.ctx.Err() != nil:
		return downloader.CauseCancelled // the pool closing also ends its tabs, in any order
	case errors.Is(cause, errHopRefused):
		return downloader.CauseHopRefused
	case !t.b.alive(), t.isDetached(), t.tr.state().crashed, isBrowserGone(err),
		t.isGone(): // the tab, or its own connection (a remote server's), ended under the render
		return downloader.CauseRendererCrashed
	case runCtx.Err() != nil:
		return downloader.CauseCancelled // the caller gave up
	}
	j.p.log.Warn("render: browser error", "url", j.u.String(), "error", err)
	return downloader.CauseRendererCrashed
}

// wait waits until the page can be read: loaded and quiet, loaded and busy for too long,
// or close to the timeout with its DOM ready.
func (j *renderJob) wait(ctx context.Context, t *tab) error {
	clk := j.p.clk
	soft := clk.NewTimer(max(j.softDeadline().Sub(clk.Now()), 0))
	defer soft.Stop()
	var quiet, idleMax clock.Timer
	var quietC, idleMaxC <-chan time.Time
	var quietSince uint64
	softFired := false
	refilled := false // the replacement tab was asked for
	defer func() {
		if quiet != nil {
			quiet.Stop()
		}
		if idleMax != nil {
			idleMax.Stop()
		}
	}()
	for {
		s := t.tr.state()
		if s.crashed {
			return errCrashed
		}
		if softFired && s.domReady {
			return nil
		}
		if s.loaded && idleMax == nil {
			idleMax = clk.NewTimer(j.p.cfg.NetworkIdleMax)
			idleMaxC = idleMax.C()
		}
		switch {
		case s.loaded && s.inflight == 0:
			if quiet == nil || quietSince != s.activity {
				if quiet != nil {
					quiet.Stop()
				}
				quiet = clk.NewTimer(j.p.cfg.NetworkQuiet)
				quietC = quiet.C()
				quietSince = s.activity
				if !refilled {
					// The page has loaded and its network is quiet: it now waits
					// NetworkQuiet doing nothing, the time for a replacement tab to start
					// (a renderer starting while the page's requests run slows it down).
					// A page that never goes quiet gets its replacement after the render.
					j.p.refill()
					refilled = true
				}
			}
		case quiet != nil:
			quiet.Stop()
			quiet, quietC = nil, nil
		}
		select {
		case <-t.tr.notify:
		case <-quietC:
			return nil
		case <-idleMaxC:
			return nil
		case <-soft.C():
			softFired = true
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// read reads the rendered DOM and the main document as served, and builds the outcome.
func (j *renderJob) read(ctx context.Context, t *tab) *downloader.Outcome {
	res, err := chromedp.Call(ctx, runtime.Evaluate, runtime.EvaluateParams{
		Expression:    renderedExpr(maxRenderedHTMLBytes),
		ReturnByValue: new(true),
	})
	if err == nil && res.ExceptionDetails != nil {
		err = errors.New(res.ExceptionDetails.Text)
	}
	var page renderedPage
	if err == nil && res.Result != nil {
		err = jsonv2.Unmarshal(res.Result.Value, &page)
	}
	if err != nil {
		return downloader.FailedBy(j.stopped(ctx, t, fmt.Errorf("read the page: %w", err)))
	}
	rendered, truncated := capHTML(page.HTML, maxRenderedHTMLBytes)
	if truncated {
		// As a plain fetch says of a body over the cap.
		j.p.log.Info("render: rendered HTML over the cap, truncated", "url", j.u.Redacted(), "max_body_bytes", maxRenderedHTMLBytes, "is_body_truncated", true)
	}
	md := t.tr.main()
	out := j.base(md, t)
	out.HealthSignal.IsBodyTruncated = truncated
	if seen, _ := j.st.snapshot(); !seen && md.found {
		// The browser got the page without our proxy: the endpoint ignores per-context
		// proxies, so nothing it does would obey the guard. Fail closed.
		j.p.log.Error("render: the browser bypassed the proxy; refusing its result", "url", j.u.String())
		return downloader.FailedBy(downloader.CauseRendererUnavailable)
	}
	if !out.Cause.IsFailure() || out.Cause == downloader.CauseHTTPStatus {
		j.rawText(ctx, md, out)
		// What the browser shows, not every text node of the DOM (SPEC §3): an empty shell
		// with its content in hidden blocks is an empty shell.
		text, _ := capHTML(collapseSpace(page.Text), maxRenderedHTMLBytes)
		n := utf8.RuneCountInString(text)
		out.TextLength = &n
		out.Text = text
		out.Body = []byte(rendered)
	}
	return out
}

// base is the outcome of the main document's response and the page's requests, without
// content: CauseOK, or the failure the response itself tells (our proxy's answer, a
// non-2xx status).
func (j *renderJob) base(md mainDocument, t *tab) *downloader.Outcome {
	out := &downloader.Outcome{HTTPStatus: int(md.status), FinalURL: md.committed, Cause: downloader.CauseOK}
	if md.status == 0 && md.otherSchemeStatus != 0 {
		// The origin redirected to a scheme the browser does not fetch: its answer is the
		// redirect (SPEC §4), though the browser reports only the failed navigation.
		md.status = md.otherSchemeStatus
		out.HTTPStatus = int(md.status)
	}
	if md.proxyCause.IsFailure() {
		// Our proxy's own answer: the origin said nothing.
		out.HTTPStatus = 0
		md.headers, md.mime = nil, ""
	}
	if out.FinalURL == "" || out.FinalURL == "about:blank" || strings.HasPrefix(out.FinalURL, "chrome-error:") {
		out.FinalURL = md.url
	}
	hs := &out.HealthSignal
	hs.ContentType = header(md.headers, "Content-Type")
	if hs.ContentType == "" {
		hs.ContentType = md.mime
	}
	hs.RedirectCount = md.redirects + j.st.chainRedirectCount()
	if md.status == http.StatusTooManyRequests || md.status == http.StatusServiceUnavailable {
		hs.RetryAfterSeconds = retryafter.Seconds(header(md.headers, "Retry-After"), j.p.clk.Now())
	}
	c := t.tr.counts()
	// The tunnels the proxy counted itself (WebSockets, workers' HTTPS) are in no event
	// of the page.
	tunnels, refusedTunnels := j.st.tunnelCounts()
	c.sub += tunnels
	c.subFailed += refusedTunnels
	_, blocked := j.st.snapshot()
	hs.XHRCount, hs.XHRFailedCount = &c.xhr, &c.xhrFailed
	hs.SubrequestCount, hs.SubrequestFailedCount = &c.sub, &c.subFailed
	hs.BlockedRequestCount = &blocked
	c.skipped += j.st.proxySkippedCount()
	hs.SkippedRequestCount = &c.skipped
	j.st.guardCounts().fill(hs)
	switch {
	case md.proxyCause.IsFailure():
		out.Fail(md.proxyCause)
	case md.status != 0 && (md.status < 200 || md.status > 299):
		out.Fail(downloader.CauseHTTPStatus)
	}
	return out
}

// rawText measures the main document as served, before JavaScript.
func (j *renderJob) rawText(ctx context.Context, md mainDocument, out *downloader.Outcome) {
	if !md.found {
		return
	}
	body, err := chromedp.Call(ctx, network.GetResponseBody, network.GetResponseBodyParams{RequestID: md.id})
	if err != nil {
		j.p.log.Debug("render: main document body", "url", j.u.String(), "error", err)
		return
	}
	out.HealthSignal.BodyBytes = int64(len(body.Body))
	n, err := htmltext.VisibleTextLength(bytes.NewReader(body.Body))
	if err != nil {
		n = 0
	}
	out.RawTextLength = &n
}

// navigationRefused is the outcome of a Page.navigate that the server answered with a CDP
// error, as Obscura answers a navigation that failed: the page's failure, classified from
// what our proxy saw of its host (classifyNavigationError), never renderer_crashed.
func (j *renderJob) navigationRefused(t *tab, msg string) *downloader.Outcome {
	md := t.tr.main()
	target := md.url
	if target == "" {
		target = j.u.String()
	}
	out := j.base(md, t)
	if !out.Cause.IsFailure() {
		out.Fail(classifyNavigationError(msg, j.st.tunnelFailure(renderproxy.HostPort(target))))
	}
	j.p.log.Info("render: the renderer refused the navigation", "url", j.u.Redacted(), "error", msg, "fail_reason", string(out.FailReason))
	return out
}

// navigationFailed is the outcome of a main document that did not commit.
func (j *renderJob) navigationFailed(ctx context.Context, t *tab, nav page.NavigateResult) *downloader.Outcome {
	md := t.tr.main()
	out := j.base(md, t)
	if out.Cause.IsFailure() {
		if out.Cause == downloader.CauseHTTPStatus {
			j.rawText(ctx, md, out)
		}
		return out
	}
	if nav.IsDownload || (strings.Contains(nav.ErrorText, "ERR_ABORTED") && md.status >= 200 && md.status <= 299) {
		// Not a page the browser shows (a download, a PDF): it was fetched fine, and
		// renders to no text.
		j.rawText(ctx, md, out)
		zero := 0
		out.TextLength = &zero
		return out
	}
	if strings.Contains(nav.ErrorText, "ERR_TUNNEL_CONNECTION_FAILED") {
		target := md.url
		if target == "" {
			target = j.u.String()
		}
		if c := j.st.tunnelFailure(renderproxy.HostPort(target)); c.IsFailure() {
			out.Fail(c)
			return out
		}
		out.Fail(downloader.CauseRendererUnavailable) // our proxy failed us
		return out
	}
	out.Fail(netErrorCause(nav.ErrorText))
	if out.Cause == downloader.CauseRendererCrashed {
		// ERR_ABORTED without a response: the navigation was cut short on our side.
		j.p.log.Warn("render: navigation aborted", "url", j.u.String(), "error_text", nav.ErrorText)
	}
	return out
}

package render

import (
	"context"
	"downloader/render/renderproxy"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/domstorage"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/storage"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// Isolation is how renders are kept apart (--render-isolation).
type Isolation string

const (
	// IsolationWipe keeps a long-lived tab per slot, each in a long-lived browser context
	// of its own, and wipes, between two renders, the state of every origin the last
	// render touched (cookies, storage, sessionStorage, service workers, permissions). The
	// HTTP cache and V8's code cache stay, so a site's next page loads its bundles from the
	// cache (Chrome keys both by top-level site, so only the same site's are reused), and
	// the tab's renderer process is reused as a long-lived tab's is. A tab and its context
	// are recycled after MaxContextRenders renders.
	IsolationWipe Isolation = "wipe"
	// IsolationContext gives every render a new browser context of its own, disposed of
	// after it: nothing at all carries over, and every render starts cold.
	IsolationContext Isolation = "context"
)

// DefaultMaxContextRenders is how many renders a long-lived browser context serves before
// it is disposed of and a new one made: it bounds what its in-memory cache and whatever
// escapes the wipe can grow to.
const DefaultMaxContextRenders = 100

// wipeStorageTypes is every kind of origin state Storage.clearDataForOrigin can clear,
// except the caches we keep (the HTTP cache and the code cache are not storage types;
// shader_cache is a cache too). Cookies are cleared for the whole context apart.
const wipeStorageTypes = "local_storage,indexeddb,cache_storage,service_workers,file_systems,websql,storage_buckets,interest_groups,shared_storage"

// siteContext is a long-lived browser context (IsolationWipe), the one of a long-lived tab,
// with its stable proxy address: a relay that forwards each connection to the proxy of the
// tab's render in progress.
type siteContext struct {
	p     *Pool
	b     *browser
	id    cdp.BrowserContextID
	relay *relay

	// Guarded by the pool's mu.
	renders   int             // renders served so far
	sites     map[string]bool // sites (domains) rendered in this context, for its cache
	requested map[string]bool // every URL its renders requested: what its cache can hold
}

// hasRequested reports whether an earlier render in sc requested u.
func (sc *siteContext) hasRequested(u string) bool {
	sc.p.mu.Lock()
	defer sc.p.mu.Unlock()
	return sc.requested[u]
}

// setCacheDisabled turns the tab's HTTP cache off or on (Network.setCacheDisabled).
func (t *tab) setCacheDisabled(ctx context.Context, off bool) error {
	if t.isCacheOff == off {
		return nil
	}
	if _, err := chromedp.Call(ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: off}); err != nil {
		return fmt.Errorf("cache disabled=%v: %w", off, err)
	}
	t.isCacheOff = off
	return nil
}

// newSiteContext makes a browser context whose proxy is a new relay of ours.
func (p *Pool) newSiteContext(ctx context.Context, b *browser) (*siteContext, error) {
	r, err := newRelay(p.cfg.ProxyHost)
	if err != nil {
		return nil, err
	}
	res, err := cdp.Call(ctx, b.b, target.CreateBrowserContext, target.CreateBrowserContextParams{
		DisposeOnDetach: new(true), // a remote endpoint drops it when our connection goes
		ProxyServer:     "http://" + r.addr(),
		ProxyBypassList: "<-loopback>", // as newTab's: the guard must see loopback too
	})
	if err != nil {
		r.close()
		return nil, fmt.Errorf("new browser context: %w", err)
	}
	p.mu.Lock()
	p.contexts++
	p.mu.Unlock()
	return &siteContext{p: p, b: b, id: res.BrowserContextID, relay: r, sites: make(map[string]bool), requested: make(map[string]bool)}, nil
}

// dispose disposes of the browser context (its tabs are closed already) and closes its
// relay.
func (sc *siteContext) dispose() {
	sc.p.mu.Lock()
	sc.p.contexts--
	sc.p.recycled++
	sc.p.mu.Unlock()
	if sc.b.alive() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		cdp.Call(ctx, sc.b.b, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: sc.id})
		cancel()
	}
	sc.relay.close()
}

// errReplaceTab says a long-lived tab cannot be wiped in place: a frame of an origin whose
// sessionStorage the render may have written is gone, so nothing can reach that storage
// but the tab's end.
var errReplaceTab = errors.New("render: a document origin of the render has no frame left")

// wipe makes a long-lived tab whose render is over ready for the next. It stops the page's
// scripts (nothing more is written, no unload handler runs), clears the sessionStorage of
// every origin the render had a document of (it belongs to this tab, and can be reached
// only through a frame of that origin: errReplaceTab when one is gone), leaves the page
// (about:blank) and, once about:blank has committed (the page's workers are gone with its
// document), clears every cookie of the context (set by JavaScript or Set-Cookie), the
// storage of every origin the render touched and the permissions granted, and forgets the
// tab's history (a later page can go back to none of it). The HTTP cache and the code
// cache are not storage types and stay. Storage.clearDataForOrigin acts on its target's
// storage partition, the context's.
//
// The commands go in five rounds; the commands of a round do not depend on each other and
// are sent together (CDP answers each on its own), so a wipe costs five round trips, not
// one per command (docs/benchmarks-render.md). The proxy of the render is closed before
// (tab.end): no response can set a cookie meanwhile.
func (t *tab) wipe(origins, docOrigins []string) error {
	ctx, cancel := context.WithTimeout(t.ctx, closeTimeout)
	defer cancel()
	sc := t.sc
	var tree page.GetFrameTreeResult
	if err := together(
		func() error {
			_, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
			return wrapErr("wipe: stop scripts", err)
		},
		func() error {
			// Sent after the command above on the same session, so read once scripts stop.
			var err error
			tree, err = chromedp.Call(ctx, page.GetFrameTree, cdp.Empty{})
			return wrapErr("wipe: frames", err)
		},
	); err != nil {
		return err
	}
	framed := frameOrigins(tree.FrameTree, nil)
	var clears []func() error
	for _, o := range docOrigins {
		if !slices.Contains(framed, o) {
			return errReplaceTab
		}
		clears = append(clears, func() error {
			_, err := chromedp.Call(ctx, domstorage.Clear, domstorage.ClearParams{StorageID: &domstorage.StorageID{SecurityOrigin: o, IsLocalStorage: false}})
			return wrapErr("wipe "+o+": sessionStorage", err)
		})
	}
	if err := together(clears...); err != nil {
		return err
	}
	if err := together(
		func() error {
			_, err := chromedp.Call(ctx, page.Navigate, page.NavigateParams{URL: "about:blank"})
			return wrapErr("wipe: leave the page", err)
		},
		func() error { return wrapErr("wipe", t.setCacheDisabled(ctx, false)) },
	); err != nil {
		return err
	}
	// The render's tracker still follows the tab: about:blank's commit is in it.
	for t.tr.main().committed != "about:blank" {
		select {
		case <-t.tr.notify:
		case <-ctx.Done():
			return fmt.Errorf("wipe: about:blank: %w", context.Cause(ctx))
		}
	}
	last := []func() error{
		func() error {
			_, err := cdp.Call(ctx, sc.b.b, storage.ClearCookies, storage.ClearCookiesParams{BrowserContextID: sc.id})
			return wrapErr("wipe: cookies", err)
		},
		func() error {
			_, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false})
			return wrapErr("wipe: scripts back on", err)
		},
	}
	for _, o := range origins {
		last = append(last, func() error {
			_, err := chromedp.Call(ctx, storage.ClearDataForOrigin, storage.ClearDataForOriginParams{Origin: o, StorageTypes: wipeStorageTypes})
			return wrapErr("wipe "+o, err)
		})
	}
	if len(origins) > 0 {
		last = append(last, func() error {
			_, err := cdp.Call(ctx, sc.b.b, cdpbrowser.ResetPermissions, cdpbrowser.ResetPermissionsParams{BrowserContextID: sc.id})
			return wrapErr("wipe: permissions", err)
		})
	}
	if err := together(last...); err != nil {
		return err
	}
	// Last and alone: right after about:blank's commit the browser may still be attaching
	// the tab's session to the new document ("Not attached to an active page").
	_, err := chromedp.Call(ctx, page.ResetNavigationHistory, cdp.Empty{})
	return wrapErr("wipe: history", err)
}

// together runs fns at once and returns the first error of theirs, once all have ended.
func together(fns ...func() error) error {
	if len(fns) == 1 {
		return fns[0]()
	}
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// wrapErr is err with what failed in front; nil for nil.
func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// frameOrigins adds the security origins of the frames of ft to out.
func frameOrigins(ft *page.FrameTree, out []string) []string {
	if ft == nil {
		return out
	}
	if ft.Frame != nil && !slices.Contains(out, ft.Frame.SecurityOrigin) {
		out = append(out, ft.Frame.SecurityOrigin)
	}
	for _, c := range ft.ChildFrames {
		out = frameOrigins(c, out)
	}
	return out
}

// origins returns the origins (scheme://host[:port]) of every request the render made or
// tried, its main document's and its frames' included (the places its pages could have
// written state to), and those of its documents alone (the only ones that can reach
// sessionStorage).
func (tr *tracker) origins() (all, docs []string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, r := range tr.reqs {
		if r.typ == network.ResourceTypeDocument && !r.failed && r.status >= 200 && r.status <= 299 {
			docs = addOrigin(docs, r.url)
		}
	}
	if tr.committed != "" {
		docs = addOrigin(docs, tr.committed)
	}
	var out []string
	add := func(raw string) {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return
		}
		o := u.Scheme + "://" + strings.ToLower(u.Host)
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	for _, r := range tr.reqs {
		add(r.url)
	}
	add(tr.committed)
	slices.Sort(out)
	slices.Sort(docs)
	return out, docs
}

// addOrigin adds the origin of raw (http and https only) to out.
func addOrigin(out []string, raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return out
	}
	o := u.Scheme + "://" + strings.ToLower(u.Host)
	if !slices.Contains(out, o) {
		out = append(out, o)
	}
	return out
}

// urls returns every URL the render requested, every hop of a redirect included (a
// permanent redirect is cached too).
func (tr *tracker) urls() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]string, 0, len(tr.reqs))
	for _, r := range tr.reqs {
		out = append(out, r.url)
		out = append(out, r.hops...)
	}
	return out
}

// relay is a long-lived context's proxy address. The context's proxy setting cannot change,
// but each render must have a proxy of its own (its connections, the limiter's hold on its
// first bytes, its counts), so the relay hands every connection it accepts to the proxy
// of the render in progress (its HTTP server serves one more listener: no byte is copied
// twice), and when that render ends, its proxy closes every connection it was handed:
// nothing the browser keeps open (an idle keep-alive connection, a CONNECT tunnel) reaches
// the next render's origin outside the next render's proxy. Between renders it refuses
// connections. Safe for concurrent use.
type relay struct {
	ln net.Listener
	wg sync.WaitGroup

	mu  sync.Mutex
	cur *connListener // the current proxy's; nil refuses
}

func newRelay(host string) (*relay, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("render relay: listen: %w", err)
	}
	r := &relay{ln: ln}
	r.wg.Go(r.serve)
	return r, nil
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		l := r.cur
		r.mu.Unlock()
		if l == nil || !l.hand(c) {
			c.Close()
		}
	}
}

// attach hands the connections from now on to the proxy x.
func (r *relay) attach(x *renderproxy.Proxy) {
	l := &connListener{ch: make(chan net.Conn), done: make(chan struct{}), addr: r.ln.Addr()}
	x.Serve(l) // ends when x closes (Close closes its listeners)
	r.swap(l)
}

// detach refuses new connections; those handed over are the proxy's to close.
func (r *relay) detach() { r.swap(nil) }

// swap makes l (nil: none) the listener new connections go to and closes the one before.
func (r *relay) swap(l *connListener) {
	r.mu.Lock()
	old := r.cur
	r.cur = l
	r.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// close stops the relay.
func (r *relay) close() {
	r.detach()
	r.ln.Close()
	r.wg.Wait()
}

// connListener is a net.Listener of the connections a relay hands over.
type connListener struct {
	ch      chan net.Conn
	done    chan struct{}
	closeMu sync.Once
	addr    net.Addr
}

// hand gives c to the listener's server; false once it is closed.
func (l *connListener) hand(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.closeMu.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

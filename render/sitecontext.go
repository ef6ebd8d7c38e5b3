package render

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/storage"
	"github.com/chromedp/cdproto/target"
)

// Isolation is how renders are kept apart (--render-isolation).
type Isolation string

const (
	// IsolationWipe keeps a few long-lived browser contexts and wipes, between two renders
	// in one, the state of every origin the last render touched (cookies, storage,
	// service workers, permissions). The HTTP cache and V8's code cache stay, so a site's
	// next page loads its bundles from the cache (Chrome keys both by top-level site, so
	// only the same site's are reused). A context is recycled after MaxContextRenders.
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

// siteContext is a long-lived browser context (IsolationWipe) with its stable proxy
// address: a relay that forwards each connection to the proxy of the render in progress.
// It serves one render at a time, each in a new tab (so sessionStorage, which belongs to a
// tab, never carries over).
type siteContext struct {
	p     *Pool
	b     *browser
	id    cdp.BrowserContextID
	relay *relay

	// Guarded by the pool's mu.
	renders int             // renders served so far
	dirty   []string        // origins the last render touched, to wipe before the next
	sites   map[string]bool // sites (domains) rendered in this context, for its cache
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
	return &siteContext{p: p, b: b, id: res.BrowserContextID, relay: r, sites: make(map[string]bool)}, nil
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

// wipe clears what the context's last render left: every cookie of the context (set by
// JavaScript or Set-Cookie), the storage of every origin it touched, and the permissions
// it was granted. It runs on tg, a new blank tab of the context (Storage.clearDataForOrigin
// acts on its target's storage partition, which is the context's).
func (sc *siteContext) wipe(ctx context.Context, tg cdp.Session, origins []string) error {
	if _, err := cdp.Call(ctx, sc.b.b, storage.ClearCookies, storage.ClearCookiesParams{BrowserContextID: sc.id}); err != nil {
		return fmt.Errorf("wipe cookies: %w", err)
	}
	for _, o := range origins {
		if _, err := cdp.Call(ctx, tg, storage.ClearDataForOrigin, storage.ClearDataForOriginParams{Origin: o, StorageTypes: wipeStorageTypes}); err != nil {
			return fmt.Errorf("wipe %s: %w", o, err)
		}
	}
	if len(origins) > 0 {
		if _, err := cdp.Call(ctx, sc.b.b, cdpbrowser.ResetPermissions, cdpbrowser.ResetPermissionsParams{BrowserContextID: sc.id}); err != nil {
			return fmt.Errorf("wipe permissions: %w", err)
		}
	}
	return nil
}

// origins returns the origins (scheme://host[:port]) of every request the render made or
// tried, its main document's and its frames' included: the places its pages could have
// written state to.
func (tr *tracker) origins() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
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
	return out
}

// takeContext returns an idle long-lived context of b for a new tab (preferring one that
// rendered site; any when site is ""), or nil when there is none. Requires p.mu held.
func (p *Pool) takeContextLocked(b *browser, site string) *siteContext {
	best := -1
	for i, sc := range p.idle {
		if sc.b != b {
			continue
		}
		if best < 0 || (site != "" && sc.sites[site] && !p.idle[best].sites[site]) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	sc := p.idle[best]
	p.idle = slices.Delete(p.idle, best, best+1)
	return sc
}

// contextFor returns a long-lived context for a new tab: an idle one of b, else a new one.
func (p *Pool) contextFor(ctx context.Context, b *browser, site string) (*siteContext, error) {
	p.mu.Lock()
	stale := p.pruneIdleLocked()
	sc := p.takeContextLocked(b, site)
	p.mu.Unlock()
	for _, o := range stale {
		o.dispose()
	}
	if sc != nil {
		return sc, nil
	}
	return p.newSiteContext(ctx, b)
}

// contextDone takes sc back after a render (or a tab that never rendered) in it: idle,
// with the origins to wipe before its next tab, or disposed of when it has served its
// renders, its browser is gone or the pool is closing.
func (p *Pool) contextDone(sc *siteContext, site string, origins []string, rendered bool) {
	p.mu.Lock()
	if rendered {
		sc.renders++
		if site != "" {
			sc.sites[site] = true
		}
	}
	for _, o := range origins {
		if !slices.Contains(sc.dirty, o) {
			sc.dirty = append(sc.dirty, o)
		}
	}
	stale := p.pruneIdleLocked()
	keep := !p.closed && p.cur == sc.b && sc.b.alive() && sc.renders < p.cfg.MaxContextRenders &&
		len(p.idle) < p.cfg.Concurrency+p.cfg.WarmTabs
	if keep {
		p.idle = append(p.idle, sc)
	} else {
		stale = append(stale, sc)
	}
	p.mu.Unlock()
	for _, o := range stale {
		o.dispose()
	}
}

// relay is a long-lived context's proxy address. The context's proxy setting cannot change,
// but each render must have a proxy of its own (its connections, the limiter's hold on its
// first bytes, its counts), so the relay forwards every connection it accepts to the proxy
// of the tab in progress, and cuts every connection when that tab ends: nothing the
// browser keeps open (an idle keep-alive connection, a CONNECT tunnel) reaches the next
// render's origin outside the next render's proxy. Safe for concurrent use.
type relay struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	target string // the tab's proxy; "" refuses connections
	conns  map[net.Conn]struct{}
	closed bool
}

func newRelay(host string) (*relay, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("render relay: listen: %w", err)
	}
	r := &relay{ln: ln, conns: make(map[net.Conn]struct{})}
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
		target := r.target
		if target == "" || r.closed {
			r.mu.Unlock()
			c.Close()
			continue
		}
		r.conns[c] = struct{}{}
		r.wg.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.wg.Done()
			r.splice(c, target)
		}()
	}
}

// splice copies between c and a new connection to target until either side ends.
func (r *relay) splice(c net.Conn, target string) {
	defer r.drop(c)
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	if !r.track(up) {
		up.Close()
		return
	}
	defer r.drop(up)
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
}

func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.target == "" {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) drop(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

// attach sends the connections from now on to the proxy at addr.
func (r *relay) attach(addr string) {
	r.mu.Lock()
	r.target = addr
	r.mu.Unlock()
}

// detach refuses new connections and cuts every open one.
func (r *relay) detach() {
	r.mu.Lock()
	r.target = ""
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
}

// close stops the relay and waits for its connections to end.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.detach()
	r.ln.Close()
	r.wg.Wait()
}

// pruneIdleLocked takes the idle contexts of a browser that is gone out of the idle list,
// for the caller to dispose of outside the lock. Requires p.mu held.
func (p *Pool) pruneIdleLocked() []*siteContext {
	var stale []*siteContext
	p.idle = slices.DeleteFunc(p.idle, func(o *siteContext) bool {
		if o.b != p.cur || !o.b.alive() {
			stale = append(stale, o)
			return true
		}
		return false
	})
	return stale
}

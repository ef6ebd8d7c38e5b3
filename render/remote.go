package render

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
)

// remoteAllocator attaches to a browser that runs elsewhere, over a websocket. It does what
// remote.NewAllocator does, and one thing more: Wait returns only once the websocket is
// closed, so that a pool's Close leaves nothing running behind it.
type remoteAllocator struct {
	endpoint    string
	dialTimeout time.Duration

	// mu orders Allocate's wg.Go before Wait, or refuses it after: a pool closing (or a
	// launch timing out) during a connect calls Wait while Allocate runs, and a
	// WaitGroup's Add from zero must happen before its Wait (the race detector found the
	// two side by side; a connection added after Wait returned would outlive Close).
	mu      sync.Mutex
	waiting bool
	wg      sync.WaitGroup
}

var (
	_ chromedp.Allocator = (*remoteAllocator)(nil)
	_ chromedp.Attacher  = (*remoteAllocator)(nil)
)

// Attaches tells chromedp that the browser is not ours to start or stop.
func (a *remoteAllocator) Attaches() bool { return true }

// Wait blocks until every connection made by Allocate is closed; an Allocate after it
// fails.
func (a *remoteAllocator) Wait() {
	a.mu.Lock()
	a.waiting = true
	a.mu.Unlock()
	a.wg.Wait()
}

// Allocate dials the endpoint and returns a browser over the connection. The connection
// closes when ctx ends, after the tabs of ctx are closed.
func (a *remoteAllocator) Allocate(ctx context.Context, opts ...chromedp.BrowserOption) (*chromedp.Browser, error) {
	dctx, cancel := context.WithTimeout(ctx, a.dialTimeout)
	defer cancel()
	wsURL, err := websocketURL(dctx, a.endpoint)
	if err != nil {
		return nil, err
	}
	conn, err := remote.DialContext(dctx, wsURL)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", wsURL, err)
	}
	tr := &trackedConn{Conn: conn, closed: make(chan struct{})}
	// The connection has its own context, so that the tabs are closed before it is.
	wctx, wcancel := context.WithCancel(context.Background())
	a.mu.Lock()
	if a.waiting {
		a.mu.Unlock()
		wcancel()
		conn.Close()
		return nil, fmt.Errorf("dial %s: the allocator was closed", wsURL)
	}
	a.wg.Go(func() {
		<-ctx.Done()
		chromedp.Cancel(ctx) // closes the tabs of ctx
		wcancel()
		<-tr.closed
	})
	a.mu.Unlock()
	b, err := chromedp.NewBrowserTransport(wctx, tr, opts...)
	if err != nil {
		wcancel()
		conn.Close()
		return nil, err
	}
	return b, nil
}

// trackedConn is a websocket connection that tells when its Close has returned.
type trackedConn struct {
	*remote.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

// websocketURL returns the browser's websocket URL for endpoint: a URL with a path
// (Obscura's ws://host:9222/devtools/browser, or Chrome's full /devtools/browser/<id>) is
// used as it is; host:port alone is looked up at http://host:port/json/version.
func websocketURL(ctx context.Context, endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	if u.Path != "" && u.Path != "/" {
		return u.String(), nil
	}
	// Chrome answers only requests whose Host is an IP address or localhost.
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	if host != "localhost" && net.ParseIP(host) == nil {
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil || len(addrs) == 0 {
			return "", fmt.Errorf("endpoint %q: resolve: %w", endpoint, err)
		}
		host = addrs[0].IP.String()
	}
	scheme := "http"
	if u.Scheme == "wss" {
		scheme = "https"
	}
	versionURL := scheme + "://" + net.JoinHostPort(host, port) + "/json/version"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, versionURL, nil)
	if err != nil {
		return "", err
	}
	client := http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	defer resp.Body.Close()
	var v struct {
		// Chrome's field, not ours. naming:external (Chrome's /json/version)
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || !strings.HasPrefix(v.WebSocketDebuggerURL, "ws") {
		return "", fmt.Errorf("endpoint %q: no webSocketDebuggerUrl at %s (status %d)", endpoint, versionURL, resp.StatusCode)
	}
	return v.WebSocketDebuggerURL, nil
}

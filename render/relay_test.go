package render

import (
	"downloader/render/renderproxy"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// Obscura cannot run on the test machines (docs/renderers.md). obscuraRelay stands in for
// it: a CDP server on 127.0.0.1 that relays to a real Chromium and reproduces, on the
// wire, the behaviours of Obscura that bear on the renderer (read from its source):
//
//   - Target.createBrowserContext succeeds but ignores proxyServer and proxyBypassList:
//     the context uses the server's own proxy (here: the Chromium's --proxy-server, as
//     Obscura's `serve --proxy`);
//   - Fetch.enable reads only urlPattern: the patterns block static sub-resources
//     (scripts, stylesheets, ...) that match them, documents are never paused, and script
//     fetch()/XHR requests are paused whatever the patterns say;
//   - one navigation at a time per connection: while Page.navigate runs, every other
//     command but Fetch.continueRequest/failRequest/fulfillRequest is held back, the
//     257th answered "Server busy"; Page.navigate answers only once the page has loaded
//     as far as waitUntil asks (DOMContentLoaded by default);
//   - Emulation.setUserAgentOverride is a no-op that answers {};
//   - a navigation failure is a CDP error, not errorText;
//   - Network.loadingFailed and Inspector.targetCrashed are never sent;
//   - at each navigation start, the JavaScript of the connection's other pages stops
//     until that navigation is done (Obscura drops their V8 runtime: suspend_js; the
//     relay pauses them in the debugger and resumes them after);
//   - a navigation's Page and Network events come in one batch when it ends, before its
//     answer, loadEventFired with DOMContentLoaded unless waitUntil asks for more (it
//     then comes once, at the load);
//   - a script request (fetch/XHR) is reported only once finished: its requestWillBeSent,
//     responseReceived and loadingFinished together; a failed one never;
//   - /json/version answers Obscura's fixed document.
type obscuraRelay struct {
	upstream string // the Chromium's browser websocket URL
	ln       net.Listener
	srv      *http.Server
	wg       sync.WaitGroup
	// navTimeout is Obscura's own end-to-end navigation deadline (OBSCURA_NAV_TIMEOUT_MS,
	// 30 s by default): a navigation that has not loaded by then is answered with an
	// error, and the connection's held commands go on.
	navTimeout time.Duration

	// maxDeferred is Obscura's MAX_DEFERRED_MESSAGES: held commands past it are answered
	// "Server busy".
	maxDeferred int
	// held is told of each command held back behind a navigation (tests wait on it).
	held chan string

	mu       sync.Mutex
	closed   bool
	navURLs  []string // every Page.navigate's URL, in order
	conns    map[*relayConn]struct{}
	handlers sync.WaitGroup // serve calls

	connCount          atomic.Int64 // websockets accepted
	ignoredProxyCount  atomic.Int64 // proxyServer params dropped
	userAgentNoopCount atomic.Int64 // Emulation.setUserAgentOverride answered without effect
	fetchEnableCount   atomic.Int64
	blockedCount       atomic.Int64 // sub-resources failed because a urlPattern matched
	documentPauseCount atomic.Int64 // document pauses continued without telling the client
	heldCount          atomic.Int64 // commands held back behind a navigation
	busyCount          atomic.Int64 // commands answered "Server busy"
	navErrorCount      atomic.Int64 // navigations answered with a CDP error
	unsentEventCount   atomic.Int64 // Network.loadingFailed and Inspector.targetCrashed kept from the client
	suspendCount       atomic.Int64 // other pages' JavaScript stopped at a navigation start
	pausedCount        atomic.Int64 // of them, Chromium's word that the page's JavaScript stopped (Debugger.paused)
	batchedCount       atomic.Int64 // Page and Network events held to the end of their navigation
	lateScriptCount    atomic.Int64 // script requests reported only once finished
	syntheticLoadCount atomic.Int64 // loadEventFired sent with DOMContentLoaded
	// paused is told of the session of each page whose JavaScript stopped (tests wait on it).
	paused chan string
	// unsent is told of each event kept from the client (tests wait on it).
	unsent   chan string
	navCount atomic.Int64
}

func newObscuraRelay(t testing.TB, upstream string) *obscuraRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &obscuraRelay{upstream: upstream, ln: ln, conns: map[*relayConn]struct{}{},
		navTimeout: 30 * time.Second, maxDeferred: 256, held: make(chan string, 1024), unsent: make(chan string, 64),
		paused: make(chan string, 64)}
	mux := http.NewServeMux()
	mux.HandleFunc("/json/version", r.version)
	mux.Handle("/devtools/browser", websocket.Server{
		// chromedp sends no Origin; Obscura checks none.
		Handshake: func(*websocket.Config, *http.Request) error { return nil },
		Handler:   r.serve,
	})
	r.srv = &http.Server{Handler: mux}
	r.wg.Go(func() { r.srv.Serve(ln) })
	t.Cleanup(r.close)
	return r
}

// url is the endpoint as an operator gives Obscura's: ws://host:port/devtools/browser.
func (r *obscuraRelay) url() string { return "ws://" + r.ln.Addr().String() + "/devtools/browser" }

// httpURL is the endpoint as host:port alone, found through /json/version.
func (r *obscuraRelay) httpURL() string { return "http://" + r.ln.Addr().String() }

func (r *obscuraRelay) close() {
	r.srv.Close() // hijacked websockets are not closed by it
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.closeBoth()
	}
	r.mu.Unlock()
	r.handlers.Wait()
	r.wg.Wait()
}

// navigated returns the URLs navigated to that do not end with the canary's suffix.
func (r *obscuraRelay) navigated() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, u := range r.navURLs {
		if !strings.Contains(u, renderproxy.CanarySuffix) {
			out = append(out, u)
		}
	}
	return out
}

// version answers Obscura's /json/version, a fixed document (obscura-cdp server.rs).
func (r *obscuraRelay) version(w http.ResponseWriter, req *http.Request) {
	_, port, _ := net.SplitHostPort(r.ln.Addr().String())
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{
		"Browser":              "Chrome/145.0.0.0",
		"Protocol-Version":     "1.3",
		"User-Agent":           "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/145.0.0.0 Safari/537.36",
		"V8-Version":           "14.5.0.0",
		"WebKit-Version":       "537.36",
		"webSocketDebuggerUrl": "ws://127.0.0.1:" + port + "/devtools/browser",
	})
}

// cdpMessage is one CDP frame, command, answer or event, with its params left raw.
type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *cdpError       `json:"error,omitempty"`
}

type cdpError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

// relayConn is one client websocket and its own upstream websocket. One goroutine (run)
// owns its state; the two readers only hand it frames.
type relayConn struct {
	r        *obscuraRelay
	client   *websocket.Conn
	upstream *websocket.Conn

	fromClient   chan cdpMessage
	fromUpstream chan cdpMessage
	done         chan struct{}
	closeOnce    sync.Once

	// Owned by run.
	nextID   int64                      // ids of the relay's own commands: above chromedp's, within Chromium's int32
	internal map[int64]func(cdpMessage) // answers to swallow, and what to do on each (nil: nothing)
	blocks   map[string][]string        // session → Obscura's block patterns (Fetch.enable'd)
	nav      *relayNav                  // the navigation in progress
	held     []cdpMessage               // commands held back behind it
	sessions map[string]bool            // the pages' sessions the client uses
	debugger map[string]bool            // sessions the relay enabled the Debugger on
	frozen   []string                   // sessions whose JavaScript stops until the navigation is done
	// scripts holds a script request's events until it has finished: session → request
	// id → its events so far.
	scripts     map[string]map[string][]cdpMessage
	swallowLoad map[string]bool // the session's real loadEventFired was already sent with DOMContentLoaded
}

// relayNav is a navigation in progress on a connection.
type relayNav struct {
	id       int64
	session  string
	url      string
	waitLoad bool        // waitUntil asks for the load event (or network idle)
	answer   *cdpMessage // Chromium's answer, held until the page has loaded
	loaded   bool
	events   []cdpMessage // its session's Page and Network events, sent when it ends
	timer    *time.Timer
}

func (r *obscuraRelay) serve(client *websocket.Conn) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		client.Close()
		return
	}
	r.handlers.Add(1)
	r.mu.Unlock()
	defer r.handlers.Done()
	r.connCount.Add(1)
	upstream, ok := dialUpstream(client, r.upstream)
	if !ok {
		return
	}
	c := &relayConn{
		r: r, client: client, upstream: upstream,
		fromClient: make(chan cdpMessage, 64), fromUpstream: make(chan cdpMessage, 64),
		done: make(chan struct{}), nextID: 1 << 30, internal: map[int64]func(cdpMessage){}, blocks: map[string][]string{},
		sessions: map[string]bool{}, debugger: map[string]bool{}, scripts: map[string]map[string][]cdpMessage{},
		swallowLoad: map[string]bool{},
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		c.closeBoth()
		return
	}
	r.conns[c] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
	}()
	var readers sync.WaitGroup
	readers.Go(func() { c.read(client, c.fromClient) })
	readers.Go(func() { c.read(upstream, c.fromUpstream) })
	c.run()
	c.closeBoth()
	readers.Wait()
}

// dropConnections closes every client connection as a server that died would: no event,
// no answer to what is pending.
// dialUpstream opens a relay's connection to the browser at upstream for client, both
// taking messages up to 64 MiB; on failure it closes client.
func dialUpstream(client *websocket.Conn, upstream string) (*websocket.Conn, bool) {
	client.MaxPayloadBytes = 64 << 20
	cfg, err := websocket.NewConfig(upstream, "http://127.0.0.1/")
	if err != nil {
		client.Close()
		return nil, false
	}
	up, err := websocket.DialConfig(cfg)
	if err != nil {
		client.Close()
		return nil, false
	}
	up.MaxPayloadBytes = 64 << 20
	return up, true
}

func (r *obscuraRelay) dropConnections() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.closeBoth()
	}
	return len(r.conns)
}

func (c *relayConn) closeBoth() {
	c.closeOnce.Do(func() {
		close(c.done)
		c.client.Close()
		c.upstream.Close()
	})
}

func (c *relayConn) read(ws *websocket.Conn, to chan<- cdpMessage) {
	defer c.closeBoth()
	for {
		var text string
		if err := websocket.Message.Receive(ws, &text); err != nil {
			return
		}
		var m cdpMessage
		if err := json.Unmarshal([]byte(text), &m); err != nil {
			return
		}
		select {
		case to <- m:
		case <-c.done:
			return
		}
	}
}

func (c *relayConn) send(ws *websocket.Conn, m cdpMessage) {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	if err := websocket.Message.Send(ws, string(b)); err != nil {
		c.closeBoth()
	}
}

// navTimedOut carries a navigation's deadline into run.
type navTimedOut struct{ nav *relayNav }

func (c *relayConn) run() {
	timeouts := make(chan navTimedOut, 1)
	for {
		select {
		case m := <-c.fromClient:
			c.fromClientMsg(m, timeouts)
		case m := <-c.fromUpstream:
			c.fromUpstreamMsg(m, timeouts)
		case to := <-timeouts:
			if c.nav == to.nav {
				c.failNav(fmt.Sprintf("Network error: navigation exceeded %dms deadline", c.r.navTimeout.Milliseconds()), timeouts)
			}
		case <-c.done:
			if c.nav != nil {
				c.nav.timer.Stop()
			}
			return
		}
	}
}

func isFetchResolution(method string) bool {
	switch method {
	case "Fetch.continueRequest", "Fetch.fulfillRequest", "Fetch.failRequest":
		return true
	}
	return false
}

func (c *relayConn) fromClientMsg(m cdpMessage, timeouts chan navTimedOut) {
	if os.Getenv("RELAY_DEBUG") != "" {
		b, _ := json.Marshal(m)
		fmt.Fprintf(os.Stderr, "CL %.300s\n", b)
	}
	if m.SessionID != "" {
		c.sessions[m.SessionID] = true
	}
	if c.nav != nil && !isFetchResolution(m.Method) {
		if len(c.held) >= c.r.maxDeferred {
			c.r.busyCount.Add(1)
			c.send(c.client, cdpMessage{ID: m.ID, SessionID: m.SessionID, Error: &cdpError{Code: -32000, Message: "Server busy: navigation in progress, try again later"}})
			return
		}
		c.r.heldCount.Add(1)
		c.held = append(c.held, m)
		select {
		case c.r.held <- m.Method:
		default:
		}
		return
	}
	c.command(m, timeouts)
}

// command handles one client command as Obscura would.
func (c *relayConn) command(m cdpMessage, timeouts chan navTimedOut) {
	switch m.Method {
	case "Target.createBrowserContext":
		var p map[string]json.RawMessage
		json.Unmarshal(m.Params, &p)
		if _, ok := p["proxyServer"]; ok {
			c.r.ignoredProxyCount.Add(1)
		}
		delete(p, "proxyServer")
		delete(p, "proxyBypassList")
		m.Params, _ = json.Marshal(p)
	case "Emulation.setUserAgentOverride":
		c.r.userAgentNoopCount.Add(1)
		c.send(c.client, cdpMessage{ID: m.ID, SessionID: m.SessionID, Result: json.RawMessage(`{}`)})
		return
	case "Fetch.enable":
		c.r.fetchEnableCount.Add(1)
		var p struct {
			Patterns *[]struct {
				URLPattern *string `json:"urlPattern"`
			} `json:"patterns"`
		}
		json.Unmarshal(m.Params, &p)
		blocks := []string{"*"} // no patterns: Obscura's default
		if p.Patterns != nil {
			blocks = nil
			for _, pt := range *p.Patterns {
				if pt.URLPattern != nil {
					blocks = append(blocks, *pt.URLPattern)
				}
			}
		}
		c.blocks[m.SessionID] = blocks
		// Chromium pauses everything; run decides per request as Obscura would.
		m.Params = json.RawMessage(`{"patterns":[{"urlPattern":"*","requestStage":"Request"}]}`)
	case "Fetch.disable":
		delete(c.blocks, m.SessionID)
	case "Page.navigate":
		var p struct {
			URL       string          `json:"url"`
			WaitUntil json.RawMessage `json:"waitUntil"`
		}
		json.Unmarshal(m.Params, &p)
		w := string(p.WaitUntil)
		// The strictest of the waitUntil values wins; none is DOMContentLoaded.
		nav := &relayNav{id: m.ID, session: m.SessionID, url: p.URL,
			waitLoad: strings.Contains(w, `"load"`) || strings.Contains(w, "networkidle")}
		nav.timer = time.AfterFunc(c.r.navTimeout, func() {
			select {
			case timeouts <- navTimedOut{nav}:
			case <-c.done:
			}
		})
		c.nav = nav
		c.r.navCount.Add(1)
		c.suspendOthers(m.SessionID)
		c.r.mu.Lock()
		c.r.navURLs = append(c.r.navURLs, p.URL)
		c.r.mu.Unlock()
	}
	c.send(c.upstream, m)
}

func (c *relayConn) fromUpstreamMsg(m cdpMessage, timeouts chan navTimedOut) {
	if os.Getenv("RELAY_DEBUG") != "" {
		b, _ := json.Marshal(m)
		fmt.Fprintf(os.Stderr, "UP %.300s\n", b)
	}
	if then, ok := c.internal[m.ID]; m.ID != 0 && ok {
		delete(c.internal, m.ID)
		if then != nil {
			then(m)
		}
		return
	}
	if n := c.nav; n != nil && m.ID == n.id && m.SessionID == n.session {
		var res struct {
			ErrorText string `json:"errorText"`
		}
		json.Unmarshal(m.Result, &res)
		switch {
		case m.Error != nil:
			c.failNav("Network error: "+m.Error.Message, timeouts)
		case res.ErrorText != "":
			c.failNav(fmt.Sprintf("Network error: %s: %s", n.url, res.ErrorText), timeouts)
		default:
			n.answer = &m
			if n.loaded {
				c.endNav(timeouts)
			}
		}
		return
	}
	if strings.HasPrefix(m.Method, "Debugger.") {
		// The relay's own, to stop the other pages: the client never asked for them.
		if m.Method == "Debugger.paused" {
			c.r.pausedCount.Add(1)
			select {
			case c.r.paused <- m.SessionID:
			default:
			}
		}
		return
	}
	if m.Method == "Target.detachedFromTarget" {
		var p struct {
			SessionID string `json:"sessionId"`
		}
		json.Unmarshal(m.Params, &p)
		delete(c.sessions, p.SessionID)
		delete(c.debugger, p.SessionID)
		delete(c.scripts, p.SessionID)
	}
	if m.Method == "Network.loadingFailed" {
		c.dropScript(m) // a failed script request is never reported
	}
	if strings.HasPrefix(m.Method, "Network.") && c.lateScript(m, timeouts) {
		return
	}
	if m.Method == "Page.loadEventFired" && c.swallowLoad[m.SessionID] {
		delete(c.swallowLoad, m.SessionID) // sent already, with DOMContentLoaded
		return
	}
	switch m.Method {
	case "Network.loadingFailed", "Inspector.targetCrashed":
		// Obscura never sends them: a failed request is not reported, and a crash of the
		// server is only the connection lost.
		c.r.unsentEventCount.Add(1)
		select {
		case c.r.unsent <- m.Method:
		default:
		}
		return
	case "Fetch.requestPaused":
		if c.paused(m) {
			return
		}
	}
	c.toClient(m, timeouts)
}

// toClient sends an event on, or holds it in its navigation's batch: Obscura sends a
// navigation's Page and Network events once it is done.
func (c *relayConn) toClient(m cdpMessage, timeouts chan navTimedOut) {
	n := c.nav
	if n == nil || m.SessionID != n.session || !(strings.HasPrefix(m.Method, "Page.") || strings.HasPrefix(m.Method, "Network.")) {
		c.send(c.client, m)
		return
	}
	c.r.batchedCount.Add(1)
	n.events = append(n.events, m)
	if m.Method == "Page.loadEventFired" || (m.Method == "Page.domContentEventFired" && !n.waitLoad) {
		n.loaded = true
		if n.answer != nil {
			c.endNav(timeouts)
		}
	}
}

// suspendOthers stops the JavaScript of the connection's pages other than session's
// until the navigation is done, as Obscura's suspend_js at a navigation start.
func (c *relayConn) suspendOthers(session string) {
	for s := range c.sessions {
		if s == session {
			continue
		}
		c.frozen = append(c.frozen, s)
		pause := func(cdpMessage) {
			if slices.Contains(c.frozen, s) { // the navigation is not done yet
				c.internalCommand(s, "Debugger.pause", map[string]any{})
			}
		}
		if c.debugger[s] {
			pause(cdpMessage{})
			continue
		}
		// A pause sent before the agent has answered its enable is refused.
		c.debugger[s] = true
		c.internalCommandThen(s, "Debugger.enable", map[string]any{}, pause)
		c.r.suspendCount.Add(1)
	}
}

// scriptEvent is the part of a Network event that tells its request.
type scriptEvent struct {
	RequestID string `json:"requestId"`
	Type      string `json:"type"`
}

// lateScript holds the events of a script request (fetch/XHR) until its loadingFinished,
// then sends them together; true: m is held (or was sent with its request's).
func (c *relayConn) lateScript(m cdpMessage, timeouts chan navTimedOut) bool {
	var e scriptEvent
	json.Unmarshal(m.Params, &e)
	reqs := c.scripts[m.SessionID]
	if m.Method == "Network.requestWillBeSent" && (e.Type == "XHR" || e.Type == "Fetch") {
		if reqs == nil {
			reqs = map[string][]cdpMessage{}
			c.scripts[m.SessionID] = reqs
		}
		reqs[e.RequestID] = append(reqs[e.RequestID], m)
		return true
	}
	held, ok := reqs[e.RequestID]
	if !ok {
		return false
	}
	if m.Method != "Network.loadingFinished" {
		reqs[e.RequestID] = append(held, m)
		return true
	}
	delete(reqs, e.RequestID)
	c.r.lateScriptCount.Add(1)
	for _, h := range append(held, m) {
		c.toClient(h, timeouts)
	}
	return true
}

// dropScript forgets the held events of a script request that failed.
func (c *relayConn) dropScript(m cdpMessage) {
	var e scriptEvent
	json.Unmarshal(m.Params, &e)
	delete(c.scripts[m.SessionID], e.RequestID)
}

// paused decides on a Fetch.requestPaused as Obscura would; false: pass it to the client.
func (c *relayConn) paused(m cdpMessage) bool {
	var p struct {
		RequestID string `json:"requestId"`
		Request   struct {
			URL string `json:"url"`
		} `json:"request"`
		ResourceType string `json:"resourceType"`
	}
	json.Unmarshal(m.Params, &p)
	blocks, ok := c.blocks[m.SessionID]
	switch {
	case ok && (p.ResourceType == "XHR" || p.ResourceType == "Fetch"):
		return false // Obscura pauses script requests, whatever the patterns
	case p.ResourceType == "Document":
		c.r.documentPauseCount.Add(1)
	case ok && matchesAny(blocks, p.Request.URL):
		c.r.blockedCount.Add(1)
		c.internalCommand(m.SessionID, "Fetch.failRequest", map[string]string{"requestId": p.RequestID, "errorReason": "BlockedByClient"})
		return true
	}
	c.internalCommand(m.SessionID, "Fetch.continueRequest", map[string]string{"requestId": p.RequestID})
	return true
}

func (c *relayConn) internalCommand(session, method string, params any) {
	c.internalCommandThen(session, method, params, nil)
}

// internalCommandThen sends a command of the relay's own and runs then on its answer.
func (c *relayConn) internalCommandThen(session, method string, params any, then func(cdpMessage)) {
	c.nextID++
	c.internal[c.nextID] = then
	b, _ := json.Marshal(params)
	c.send(c.upstream, cdpMessage{ID: c.nextID, SessionID: session, Method: method, Params: b})
}

// failNav answers the navigation with a CDP error, as Obscura answers a failed one.
func (c *relayConn) failNav(msg string, timeouts chan navTimedOut) {
	c.r.navErrorCount.Add(1)
	n := c.nav
	n.answer = &cdpMessage{ID: n.id, SessionID: n.session, Error: &cdpError{Code: -32000, Message: msg}}
	c.endNav(timeouts)
}

// endNav sends the navigation's answer and goes on with the held commands, until one of
// them starts another navigation.
func (c *relayConn) endNav(timeouts chan navTimedOut) {
	n := c.nav
	n.timer.Stop()
	c.nav = nil
	for _, s := range c.frozen {
		// Not Debugger.resume: a page that ran no JavaScript meanwhile is not paused, and
		// its pending pause would stop its next script. disable ends both.
		c.internalCommand(s, "Debugger.disable", map[string]any{})
		delete(c.debugger, s)
	}
	c.frozen = nil
	// The batch, before the answer (obscura-cdp sends a command's events first);
	// loadEventFired with DOMContentLoaded unless waitUntil asked for the load.
	hasLoad := slices.ContainsFunc(n.events, func(e cdpMessage) bool { return e.Method == "Page.loadEventFired" })
	for _, e := range n.events {
		c.send(c.client, e)
		if e.Method == "Page.domContentEventFired" && !hasLoad && n.answer.Error == nil {
			c.r.syntheticLoadCount.Add(1)
			c.swallowLoad[n.session] = true
			c.send(c.client, cdpMessage{SessionID: n.session, Method: "Page.loadEventFired", Params: e.Params})
		}
	}
	c.send(c.client, *n.answer)
	for len(c.held) > 0 && c.nav == nil {
		m := c.held[0]
		c.held = c.held[1:]
		c.command(m, timeouts)
	}
}

// matchesAny is Obscura's url_matches_cdp_pattern over patterns: "*" matches all, else the
// parts between stars must appear in order.
func matchesAny(patterns []string, url string) bool {
	for _, p := range patterns {
		if p == "*" {
			return true
		}
		rest, ok := url, true
		for part := range strings.SplitSeq(p, "*") {
			if part == "" {
				continue
			}
			i := strings.Index(rest, part)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(part):]
		}
		if ok {
			return true
		}
	}
	return false
}

// startProxiedBrowser starts chromium-headless-shell with a debugging port and its own
// proxy for every context that names none, as Obscura's `serve --proxy` gives its own to
// every context, and returns its websocket URL.
func startProxiedBrowser(t testing.TB, proxy string) string {
	return startDebugBrowser(t, "relay-browser-",
		"--remote-allow-origins=*", "--proxy-server="+proxy, "--proxy-bypass-list=<-loopback>")
}

// Package fetch is the plain HTTP fetch (should_render=false) behind entries A, B and C:
// one GET through the SSRF guard, with connect, TLS, header and body-stall timeouts, a
// body cap that also holds after decompression, manual redirects with one limiter
// admission per hop, and the classification of every failure into SPEC §4's closed
// fail_reason set.
//
// Decisions (see also Classify):
//   - The on-the-wire moment (SPEC §2, a spent slot) is the connection attempt of a new
//     connection (after DNS and the SSRF check), moved forward to the request's first
//     write, or that write alone on a reused connection (wireconn.go). A request that
//     fails after its attempt (refused, reset, TLS, timeout) has spent its slot; one that
//     never got that far (DNS failure, the SSRF guard) has not. If the limiter's wait
//     fails (ctx ends first), nothing is sent and the fetch fails with self_rate_limited.
//   - Every write of a request is a request of its own: the transport never sends a
//     request twice by itself. Requests go through Transport.RoundTrip (no http.Client:
//     redirects are ours) without a body. net/http then finds a GET replayable and, when
//     a reused connection fails before any answer, tries it again on another connection:
//     the wire ticket refuses that second connection attempt or first write before a
//     byte goes out (it lets out one of each per admission), so the origin sees the
//     request once; the failure is reported (connection_reset: the origin did receive
//     the request) and logged, and retrying is the caller's decision. (A body that is
//     empty but not replayable would stop the retry earlier, but net/http probes such a
//     body on every request with a goroutine and a 200 ms timer.)
//   - Every redirect hop, to the same host too, gets its own admission from
//     the caller's HopAdmitter, passed with the request (politeness is per request) and its own wire ticket. A hop whose URL names
//     a forbidden address, or whose host resolves to one, fails with
//     destination_forbidden before any connection is made. More than MaxRedirects hops:
//     the last 3xx is the final answer (http_status_error).
//   - The body is read until MaxBodyBytes of decoded content (and at most MaxBodyBytes on
//     the wire); the rest is left unread. A capped body is not a failure: the outcome
//     carries what was read and the log says is_body_truncated.
//   - raw_text_length: for HTML (text/html, application/xhtml+xml, or sniffed as HTML when
//     no Content-Type is sent), the visible text of the body decoded to UTF-8 from its
//     declared or sniffed charset (htmltext.VisibleTextLength); for other text/* types,
//     the characters of the text with white space collapsed (htmltext.PlainTextLength);
//     0 for anything else (images, JSON, PDFs) and for a content coding we do not decode.
//   - health_signal.body_bytes counts the decoded bytes read of the final response;
//     content_type is the final response's header as sent (sniffed when absent).
//   - Network timeouts run on real time, as net/http's own do; the injected clock times
//     elapsed_ms and dates Retry-After.
package fetch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/retryafter"
)

// HopAdmitter admits redirect hops into the limiter; the caller passes one per request
// (Fetch's hops).
type HopAdmitter = limiter.HopAdmitter

// Config configures a Fetcher. Zero durations and sizes take the defaults below.
type Config struct {
	Clock clock.Clock     // default clock.Real{}
	Guard *netguard.Guard // default: a guard with no rules and the system resolver
	// UserAgent is sent on every request; default DefaultUserAgent.
	UserAgent       string
	ConnectTimeout  time.Duration // DNS, the limiter's wait at the connection attempt (rare: another request's hold) and TCP connect; default 10s
	TLSTimeout      time.Duration // TLS handshake; default 10s
	ResponseTimeout time.Duration // headers after the request is sent, and any stall of the body; default 30s
	MaxBodyBytes    int64         // default 10 MiB, decoded and on the wire
	MaxRedirects    int           // default 5; negative: follow none
	// TLSConfig, when set, is cloned for the transport (trusted roots for a private CA,
	// say). Default: the system roots, TLS 1.2 at least.
	TLSConfig *tls.Config
	// DisableHTTP2 turns HTTP/2 off (--should-use-http2=false): every TLS connection
	// offers http/1.1 only. By default ALPN offers h2 first (h2.go).
	DisableHTTP2 bool
	Logger       *slog.Logger // default: discard
}

// Defaults.
const (
	DefaultUserAgent       = "Mozilla/5.0 (compatible; downloader/1.0)"
	DefaultConnectTimeout  = 10 * time.Second
	DefaultTLSTimeout      = 10 * time.Second
	DefaultResponseTimeout = 30 * time.Second
	DefaultMaxBodyBytes    = 10 << 20
	DefaultMaxRedirects    = 5
)

// acceptHTML is the Accept header of every request.
const acceptHTML = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// redirectDrainBytes bounds what is read of a redirect's body so its connection can be
// reused.
const redirectDrainBytes = 64 << 10

// maxIdleConns bounds the idle connections kept across all hosts. An idle connection per
// polite host is what makes its next request cheap; past the bound, net/http closes the
// oldest under its one pool-wide lock on every connection returned, which serialised all
// requests at 10^4 hosts (docs/benchmarks-lease.md). A quarter of the descriptor limit
// (which Go raises to the hard limit at start) leaves the rest to requests in flight, the
// store and the server, within 1024..65536.
func maxIdleConns() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return int(min(max(lim.Cur/4, 1024), 65536))
}

// Fetcher does plain GETs. It owns one *http.Transport whose connections pass through the
// guard. Safe for concurrent use; call Close when done.
type Fetcher struct {
	cfg Config
	log *slog.Logger
	// The values of the headers every request sends, shared by all (never modified).
	userAgent, accept, acceptEncoding []string
	transport                         *http.Transport
	// h1 never offers h2: a 421 over HTTP/2 is sent again on it (h2.go). It is transport
	// itself when HTTP/2 is off.
	h1     *http.Transport
	h2     *h2Pool         // nil when HTTP/2 is off
	closed context.Context // done after Close: aborts dials still in progress
	close  context.CancelFunc
}

// New returns a Fetcher for cfg.
func New(cfg Config) *Fetcher {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Guard == nil {
		cfg.Guard = netguard.New(netguard.Config{})
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.TLSTimeout <= 0 {
		cfg.TLSTimeout = DefaultTLSTimeout
	}
	if cfg.ResponseTimeout <= 0 {
		cfg.ResponseTimeout = DefaultResponseTimeout
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	switch {
	case cfg.MaxRedirects == 0:
		cfg.MaxRedirects = DefaultMaxRedirects
	case cfg.MaxRedirects < 0:
		cfg.MaxRedirects = 0
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var tlsCfg *tls.Config
	if cfg.TLSConfig != nil {
		tlsCfg = cfg.TLSConfig.Clone()
	} else {
		tlsCfg = &tls.Config{}
	}
	if tlsCfg.MinVersion == 0 {
		tlsCfg.MinVersion = tls.VersionTLS12
	}
	f := &Fetcher{cfg: cfg, log: log,
		userAgent: []string{cfg.UserAgent}, accept: []string{acceptHTML}, acceptEncoding: []string{acceptEncoding}}
	f.closed, f.close = context.WithCancel(context.Background())
	guard, connectTimeout, closed := cfg.Guard, cfg.ConnectTimeout, f.closed
	f.transport = &http.Transport{
		Proxy: nil, // never an environment proxy: the guard must see the origin's address
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			// net/http detaches dials from the request's cancellation (a later request may
			// use the connection), so the connect timeout and Close bound them instead.
			ctx, cancel := context.WithTimeout(ctx, connectTimeout)
			defer cancel()
			stop := context.AfterFunc(closed, cancel)
			defer stop()
			c, err := guard.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			wc := &wireConn{Conn: c}
			if t := ticketOf(ctx); t != nil {
				// The dial passed t's gate (its one attempt): the hop waits for this
				// connection if net/http hands it another that takes no stream (owndial.go).
				wc.own.Store(t.own)
			}
			return wc, nil
		},
		TLSClientConfig:        tlsCfg,
		TLSHandshakeTimeout:    cfg.TLSTimeout,
		ResponseHeaderTimeout:  cfg.ResponseTimeout,
		DisableCompression:     true, // we ask for and decode encodings ourselves, under the cap
		MaxIdleConns:           maxIdleConns(),
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
	f.h1 = f.transport
	if !cfg.DisableHTTP2 {
		f.enableHTTP2()
	}
	return f
}

// Close closes idle connections and aborts dials in progress. Fetches already past their
// dial are not interrupted; their connections close when they finish and Close is called
// again, or after the idle timeout.
func (f *Fetcher) Close() {
	f.close()
	f.transport.CloseIdleConnections()
	if f.h2 != nil {
		f.h1.CloseIdleConnections()
		f.h2.close()
	}
}

// Fetch does one GET of u, following redirects. adm is the limiter admission of u's
// domain, already taken by the caller, who also finishes it after Fetch returns (Cancel
// gives the slot back only if nothing went on the wire); nil means none. Fetch puts adm
// on the wire at the request's connection attempt or first write. hops admits each
// redirect hop (the caller builds it for this request: engine.Hops); Fetch takes and
// finishes the hop admissions. nil hops: redirects are not followed (the 3xx is the
// answer). The outcome is never nil; it carries the typed cause of a failure (Cause, with
// the reason it means on its own in FailReason); its TextLength and XHR fields are nil
// (nothing was rendered).
func (f *Fetcher) Fetch(ctx context.Context, u *url.URL, adm *limiter.Admission, hops HopAdmitter) *downloader.Outcome {
	return f.FetchWith(ctx, u, adm, hops, downloader.FetchOptions{})
}

// FetchOnce is Fetch for a request whose connection will not be asked again soon (an
// entry C probe: one GET of a domain among many): it asks the origin to close the
// connection (Connection: close) and keeps it out of the idle pool, where 10^4 one-off
// connections would each be pooled, evicted and closed under the transport's one lock.
// Measured in docs/benchmarks-lease.md.
func (f *Fetcher) FetchOnce(ctx context.Context, u *url.URL, adm *limiter.Admission, hops HopAdmitter) *downloader.Outcome {
	return f.FetchWith(ctx, u, adm, hops, downloader.FetchOptions{IsOnce: true})
}

// FetchWith is Fetch with the request's options: its allow-listed headers (sent on every
// hop to u's host; on hops to another host without Cookie) and IsOnce (FetchOnce).
// Fetch and FetchOnce are its shorthands.
func (f *Fetcher) FetchWith(ctx context.Context, u *url.URL, adm *limiter.Admission, hops HopAdmitter, opts downloader.FetchOptions) *downloader.Outcome {
	start := f.cfg.Clock.Now()
	out := &downloader.Outcome{}
	cur := *u
	var err error
	defer func() {
		out.HealthSignal.ElapsedMs = f.cfg.Clock.Now().Sub(start).Milliseconds()
		f.logOutcome(u, out, err)
	}()

	// h1: this hop is a 421's second send, on HTTP/1.1 (h2.go); misdirected counts those
	// hops, which are not redirects (a 421 is sent again once: the second send is on
	// HTTP/1.1, where a 421 is the answer).
	h1, misdirected := false, 0
	for hop := 0; ; hop++ {
		// The one host (SPEC §2): whatever URL a caller hands in, only its canonical
		// host is guarded, dialled and written as the Host header and TLS server name.
		// A host with no canonical form is left for CheckURLHost to refuse.
		if c, _, cerr := downloader.CanonicalizeURL(&cur); cerr == nil {
			cur = *c
		}
		out.FinalURL = cur.String()
		out.HealthSignal.RedirectCount = hop - misdirected
		if cerr := f.cfg.Guard.CheckURLHost(cur.Host); cerr != nil {
			err = cerr
			out.Fail(downloader.CauseDestinationForbidden)
			return out
		}
		hopAdm := adm
		if hop > 0 {
			a, aerr := f.admitHop(ctx, hops, &cur)
			if aerr != nil {
				err = aerr
				out.Fail(hopRefusalCause(aerr))
				return out
			}
			hopAdm = &a
		}
		var next *url.URL
		hopOpts := opts
		if hop > 0 {
			if cur != *u {
				// Validators are the URL's, not its redirect targets' (a 421's second send
				// is the URL's own request).
				hopOpts.Conditional = downloader.Validators{}
			}
			hopOpts.Headers = opts.Headers.ForHop(strings.EqualFold(cur.Hostname(), u.Hostname()))
		}
		next, err = f.hop(ctx, hop-misdirected, &cur, hopAdm, hops != nil, out, h1, hopOpts)
		if hop > 0 {
			hopAdm.Cancel() // degrades to Done once the hop went on the wire
		}
		if h1 = errors.Is(err, errMisdirected); h1 {
			misdirected++
			continue // the same URL under an admission of its own, like a hop
		}
		if next == nil {
			return out
		}
		cur = *next
	}
}

func (f *Fetcher) admitHop(ctx context.Context, hops HopAdmitter, u *url.URL) (limiter.Admission, error) {
	domain, err := downloader.CanonicalHost(u.Hostname())
	if err != nil {
		return limiter.Admission{}, fmt.Errorf("redirect to %s: %w", u.Redacted(), err)
	}
	a, err := hops.AdmitHop(ctx, domain)
	if err != nil {
		return limiter.Admission{}, fmt.Errorf("admit redirect hop to %s: %w", domain, err)
	}
	return a, nil
}

// hopState is what the trace hooks learn about one hop. The TLS hooks may run on the
// transport's dialling goroutine, hence the atomics.
type hopState struct {
	connected  atomic.Bool // GotConn ran
	reused     atomic.Bool // on a connection used before
	answered   atomic.Bool // the first byte of an answer arrived
	tlsStarted atomic.Bool
	tlsDone    atomic.Bool // the handshake succeeded
	wireErr    error       // the wire wait's error, set on the request's goroutine
	refused    int         // second sends the ticket refused
}

var (
	errNotOurConn = errors.New("fetch: a connection the fetcher did not dial")
	errBodyStalls = errors.New("fetch: the response body stalled")
)

// hop sends one request for u and fills out from its answer. It returns the next URL
// when the answer is a redirect to follow (only when follow: the caller gave a
// HopAdmitter). opts are the hop's: IsOnce closes the connection after the answer
// (FetchOnce), Headers are the caller's allow-listed headers for this hop, Conditional the
// validators sent with the URL's own request. h1 sends it on HTTP/1.1 (after a 421 over
// HTTP/2); a 421 over HTTP/2 to follow is errMisdirected.
func (f *Fetcher) hop(ctx context.Context, hop int, u *url.URL, adm *limiter.Admission, follow bool, out *downloader.Outcome, h1 bool, opts downloader.FetchOptions) (*url.URL, error) {
	hopCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	st := &hopState{}
	ticket := newWireTicket(hopCtx, adm)
	trace := &httptrace.ClientTrace{
		TLSHandshakeStart: func() { st.tlsStarted.Store(true) },
		TLSHandshakeDone: func(cs tls.ConnectionState, err error) {
			if err == nil {
				st.tlsDone.Store(true)
			}
			ticket.own.tlsDone(cs, err)
		},
		GotConn: func(info httptrace.GotConnInfo) {
			st.connected.Store(true)
			st.reused.Store(info.Reused)
			wc := wireConnOf(info.Conn)
			if wc == nil {
				// Not one of ours (cannot happen with our transport): nothing may go out.
				cancel(errNotOurConn)
				closeConn(info.Conn)
				return
			}
			if wc.isH2.Load() {
				return // the stream passes the ticket in h2Conn.RoundTrip
			}
			wc.arm(ticket)
		},
		GotFirstResponseByte: func() { st.answered.Store(true) },
	}
	reqCtx := httptrace.WithClientTrace(netguard.WithConnectHook(withTicket(hopCtx, ticket), ticket), trace)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, u.String(), nil)
	if err != nil {
		ticket.finish()
		out.Fail(downloader.CauseInvalidURL)
		return nil, fmt.Errorf("fetch %s: %w", u.Redacted(), err)
	}
	req.Close = opts.IsOnce
	// The same values for every request, shared: the transport only reads them.
	req.Header = http.Header{"User-Agent": f.userAgent, "Accept": f.accept, "Accept-Encoding": f.acceptEncoding}
	opts.Headers.SetOn(req.Header) // the caller's allow-listed headers (User-Agent only where the operator allows it)
	if v := opts.Conditional; v.Etag != "" {
		req.Header["If-None-Match"] = []string{v.Etag}
	} else if v.LastModified != "" {
		// RFC 9110 §13.1.3: If-Modified-Since only without If-None-Match.
		req.Header["If-Modified-Since"] = []string{v.LastModified}
	}

	rt := f.transport
	if h1 {
		rt = f.h1
	}
	resp, err := rt.RoundTrip(req)
	// The request's attempt and write have happened or never will: the admission is the
	// caller's again.
	st.refused, st.wireErr = ticket.finish()
	switch {
	case err != nil && st.reused.Load() && !st.answered.Load() && st.wireErr == nil:
		// Where net/http sends the request again on another connection: the ticket
		// refused that (refused_count), or it failed before (refused_count 0).
		f.log.Info("fetch: a reused connection failed before any answer; not sent again",
			"url", u.Redacted(), "error", err.Error(), "refused_count", st.refused)
	case st.refused > 0:
		f.log.Warn("fetch: a second send of one request was refused: it needs an admission of its own",
			"url", u.Redacted(), "refused_count", st.refused)
	}
	if err != nil {
		out.Fail(f.classifyHop(ctx, hopCtx, st, err))
		return nil, fmt.Errorf("fetch %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	out.HealthSignal.HTTPVersion = httpVersion(resp)

	if resp.StatusCode == http.StatusMisdirectedRequest && resp.ProtoMajor == 2 && follow && !h1 {
		f.readBody(hopCtx, cancel, resp, redirectDrainBytes)
		return nil, errMisdirected
	}
	if next := f.redirectTarget(hop, u, resp, follow); next != nil {
		// Drain a little so the connection can be reused; errors here do not matter.
		f.readBody(hopCtx, cancel, resp, redirectDrainBytes)
		return next, nil
	}

	out.HTTPStatus = resp.StatusCode
	switch {
	case resp.StatusCode == http.StatusNotModified && !opts.Conditional.IsZero():
		// The answer to our own conditional request: the stored page is still the page.
		out.Cause = downloader.CauseOK
		out.HealthSignal.IsNotModified = true
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		out.Fail(downloader.CauseHTTPStatus)
	default:
		out.Cause = downloader.CauseOK
		if hop == 0 {
			// The URL's own answer (not a redirect target's): its next request may be
			// conditional on them.
			out.Validators = downloader.Validators{Etag: resp.Header.Get("ETag"), LastModified: resp.Header.Get("Last-Modified")}
		}
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		out.HealthSignal.RetryAfterSeconds = retryafter.Seconds(resp.Header.Get("Retry-After"), f.cfg.Clock.Now())
	}
	b := f.readBody(hopCtx, cancel, resp, f.cfg.MaxBodyBytes)
	out.Body = b.body
	// As served, for the stored page (WARC). The map is the response's own, not a copy:
	// nothing changes it once RoundTrip returned (trailers go to resp.Trailer, and the
	// transport decodes no body itself: we send Accept-Encoding), and resp ends here.
	out.ResponseHeaders = resp.Header
	out.HealthSignal.BodyBytes = int64(len(b.body))
	out.HealthSignal.ContentType = contentType(resp.Header.Get("Content-Type"), b.body)
	n := textLength(out.HealthSignal.ContentType, b.body, b.undecoded)
	out.RawTextLength = &n
	if b.truncated {
		out.HealthSignal.IsBodyTruncated = true
		f.log.Info("fetch: body over the cap, truncated", "url", u.Redacted(), "max_body_bytes", f.cfg.MaxBodyBytes, "is_body_truncated", true)
	}
	if b.decodeErr != nil {
		f.log.Debug("fetch: body does not decode", "url", u.Redacted(), "error", b.decodeErr)
	}
	if b.err != nil {
		// The answer arrived but its body broke off. A non-2xx status stays the reason
		// (it says more); after a 2xx the failure of the body is the reason.
		if out.FailReason == "" {
			out.Fail(f.classifyHop(ctx, hopCtx, st, b.err))
		}
		return nil, fmt.Errorf("fetch %s: read body: %w", u.Redacted(), b.err)
	}
	return nil, nil
}

// redirectTarget returns where a redirect response sends us, or nil when resp is the
// final answer (not a redirect, no usable Location, too many hops, or not follow: no
// HopAdmitter).
func (f *Fetcher) redirectTarget(hop int, u *url.URL, resp *http.Response, follow bool) *url.URL {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return nil
	}
	if !follow || hop >= f.cfg.MaxRedirects {
		return nil
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil
	}
	// The target is read with the one host parser (SPEC §2): its host is canonical
	// before the hop is admitted, guarded, dialled and sent.
	next, err := downloader.ParseLocation(u, loc)
	if err != nil {
		return nil
	}
	switch next.Scheme {
	case "http", "https":
	default:
		return nil
	}
	if next.Hostname() == "" {
		return nil
	}
	next.User = nil // never send credentials an origin put in a Location
	next.Fragment, next.RawFragment = "", ""
	return next
}

// closeConn closes the TCP connection under c without a TLS close_notify.
func closeConn(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		tc.NetConn().Close()
		return
	}
	c.Close()
}

func (f *Fetcher) logOutcome(u *url.URL, out *downloader.Outcome, err error) {
	if !f.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := []any{
		"url", u.Redacted(), "final_url", out.FinalURL, "http_status", out.HTTPStatus,
		"fail_reason", string(out.FailReason), "elapsed_ms", out.HealthSignal.ElapsedMs,
		"body_bytes", out.HealthSignal.BodyBytes, "redirect_count", out.HealthSignal.RedirectCount,
	}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	f.log.Debug("fetch", attrs...)
}

// statically check that the ticket is what the guard tells of connection attempts.
var _ netguard.ConnectHook = (*wireTicket)(nil)

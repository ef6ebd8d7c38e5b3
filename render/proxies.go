package render

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"downloader"
	"downloader/netguard"
	"downloader/render/renderproxy"
)

// The render's side of its proxy (package renderproxy): the proxy forwards, tunnels and
// terminates; what a render admits, and how its connections reach an origin (the Guard,
// the wire moment), it asks the render, through proxied.

// newProxy makes a render's proxy; with listen, on a listener of its own (else it serves
// only the connections handed to it: a relay's, the guard proxy's requests).
func (p *Pool) newProxy(listen bool) (*renderproxy.Proxy, error) {
	return renderproxy.New(p.ctx, renderproxy.Config{
		ListenHost: p.cfg.ProxyHost,
		Log:        p.log,
		OriginTLS:  p.cfg.chainTLS,
		Cause:      proxyFailureCause,
	}, listen)
}

// proxied is a render as its proxy asks it (renderproxy.Render).
type proxied struct {
	st        *renderState
	dialGuard func(ctx context.Context, network, address string) (net.Conn, error)
	log       *slog.Logger
}

// proxied is the render st as its proxy sees it.
func (p *Pool) proxied(st *renderState) proxied {
	return proxied{st: st, dialGuard: p.cfg.Guard.DialContext, log: p.log}
}

var _ renderproxy.Render = proxied{}

func (v proxied) Domain() string                     { return v.st.domain }
func (v proxied) SawRequest()                        { v.st.sawRequest() }
func (v proxied) AdmitTunnel(domain string) bool     { return v.st.admitTunnel(domain) }
func (v proxied) SkipsRequest(r *http.Request) bool  { return v.st.skipsRequest(r) }
func (v proxied) CountsRequest(r *http.Request) bool { return v.st.proxyCounts(r) }
func (v proxied) AdmitSubrequest(domain string) bool { return v.st.admitSubrequest(domain) }

func (v proxied) RecordFailure(hostport string, c downloader.Cause) {
	v.st.recordTunnelFailure(hostport, c)
}

// AdmitDocument admits a main document hop at the proxy (interceptProxy: proxyHops),
// when the render admits its hops there.
func (v proxied) AdmitDocument(r *http.Request) (isDocument, ok bool) {
	h := v.st.proxyHops()
	if h == nil || !isDocumentRequest(r) {
		return false, false
	}
	return true, h.admit(r)
}

// Dial connects to an origin through the Guard (isTunnel: for a CONNECT). The connection
// holds the first request bytes to the page's own host, and those of each admitted hop,
// until the limiter lets them out (originConn).
func (v proxied) Dial(ctx context.Context, stop <-chan struct{}, network, address string, isTunnel bool) (net.Conn, error) {
	st := v.st
	if host, _, err := net.SplitHostPort(address); err == nil {
		if d, err := downloader.CanonicalHost(host); err == nil {
			ctx = netguard.WithConnectHook(ctx, &attemptHook{st: st, domain: d, stop: stop})
		}
	}
	conn, err := v.dialGuard(ctx, network, address)
	if err != nil {
		var fe *netguard.ForbiddenError
		if errors.As(err, &fe) {
			st.countBlocked()
			v.log.Info("render sub-request refused", "address", address, "reason", fe.Reason)
		}
		return nil, err
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return conn, nil
	}
	d, err := downloader.CanonicalHost(host)
	if err != nil {
		return conn, nil
	}
	oc := &originConn{Conn: conn, st: st, domain: d, stop: stop}
	if isTunnel {
		oc.records = &recordScanner{}
	}
	return oc, nil
}

// proxyFailureCause is the cause of a request our proxy could not forward: a TLS handshake
// of ours with the origin that failed (a terminated request's) is tls_failed, the rest is
// what the dial's error tells (errorCause).
func proxyFailureCause(err error) downloader.Cause {
	if errors.Is(err, renderproxy.ErrOriginTLS) {
		return downloader.CauseTLSFailed
	}
	return errorCause(err)
}

// startGuardTLS turns the guard proxy's TLS termination on when the pool is configured
// for it, and logs which mode is in force either way.
func (p *Pool) startGuardTLS() error {
	if p.cfg.GuardProxyCADir == "" {
		p.log.Info("render guard proxy: HTTPS requests pass as tunnels (no TLS termination): on Obscura, a page's own HTTPS navigation to another host is not admitted, skipped types over HTTPS are sent, the caps count tunnels",
			"guard_proxy_addr", p.guard.Addr(), "is_tls_terminated", false)
		return nil
	}
	ca, err := renderproxy.LoadOrCreateAuthority(p.cfg.GuardProxyCADir)
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	p.guard.StartTermination(ca)
	p.log.Info("render guard proxy: terminating TLS; the renderer must trust our CA (SSL_CERT_FILE for Obscura)",
		"guard_proxy_addr", p.guard.Addr(), "is_tls_terminated", true, "ca_path", ca.CertPath())
	return nil
}

package main

import (
	"errors"
	"fmt"
	"net"
	"os"

	"downloader/egressproxy"
	"downloader/netguard"
)

// envEgressProxyCredentials holds the egress proxy's "username:password" when no
// --egress-proxy-credentials-file is given. It is not a flag (a flag's value shows in
// process listings), so it has no --egress-proxy-credentials.
const envEgressProxyCredentials = "DOWNLOADER_EGRESS_PROXY_CREDENTIALS"

// loadEgressProxy checks --egress-proxy and reads its credentials (docs/egress-proxy.md).
// Its errors name the flag or the variable, never the credentials.
func (c *config) loadEgressProxy(getenv func(string) string) error {
	if c.EgressProxy == "" {
		if c.EgressProxyCredentialsFile != "" {
			return errors.New("--egress-proxy-credentials-file needs --egress-proxy")
		}
		return nil
	}
	var raw string
	var from string
	switch {
	case c.EgressProxyCredentialsFile != "":
		b, err := os.ReadFile(c.EgressProxyCredentialsFile)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is the flag's; the error says only what went wrong
			}
			return fmt.Errorf("--egress-proxy-credentials-file %s: %w", c.EgressProxyCredentialsFile, err)
		}
		raw, from = string(b), "--egress-proxy-credentials-file"
	case getenv(envEgressProxyCredentials) != "":
		raw, from = getenv(envEgressProxyCredentials), envEgressProxyCredentials
	}
	if raw != "" {
		creds, err := egressproxy.ParseCredentials(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		c.egressProxyCredentials = creds
	}
	d, err := egressproxy.New(egressproxy.Config{URL: c.EgressProxy, Credentials: c.egressProxyCredentials})
	if err != nil {
		return fmt.Errorf("--egress-proxy: %w", err)
	}
	c.egressProxyDialer = d
	return nil
}

// egressDialer is the guard's dialer: the egress proxy's, or nil (the guard's default,
// direct).
func (c *config) egressDialer() netguard.ContextDialer {
	if c.egressProxyDialer == nil {
		return nil
	}
	return c.egressProxyDialer
}

// canaryDialer dials the egress canary: through the egress proxy when there is one.
func (c *config) canaryDialer() netguard.ContextDialer {
	if c.egressProxyDialer == nil {
		return &net.Dialer{}
	}
	return c.egressProxyDialer
}

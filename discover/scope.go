package discover

import (
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/net/publicsuffix"

	"downloader"
)

// ScopeKind says which hosts a crawl may follow links to (--scope).
type ScopeKind string

const (
	// ScopeHost: the seeds' hosts only (the default).
	ScopeHost ScopeKind = "host"
	// ScopeDomain: any host under a seed's registrable domain (eTLD+1 by the public
	// suffix list): from www.shop.test, shop.test and img.shop.test too.
	ScopeDomain ScopeKind = "domain"
	// ScopeHosts: the hosts listed (--scope-host-list).
	ScopeHosts ScopeKind = "hosts"
	// ScopePattern: any host; the include pattern alone says what is in scope.
	ScopePattern ScopeKind = "pattern"
)

// ScopeKinds lists the kinds in the order --help names them.
var ScopeKinds = [...]ScopeKind{ScopeHost, ScopeDomain, ScopeHosts, ScopePattern}

// ScopeConfig is the scope as the flags give it.
type ScopeConfig struct {
	Kind ScopeKind
	// HostList is ScopeHosts' hosts (normalised like the limiter's keys).
	HostList []string
	// Include and Exclude are regular expressions (RE2) matched against the canonical
	// URL; empty matches everything (Include) or nothing (Exclude). They apply on top of
	// every kind: a URL is in scope when its host passes the kind, Include matches and
	// Exclude does not.
	Include, Exclude string
}

// Scope decides whether a canonical URL is in a crawl's scope. Build it with NewScope,
// then Add each seed. Not safe for concurrent use while seeds are added; safe after.
type Scope struct {
	kind             ScopeKind
	hosts            map[string]bool // ScopeHost, ScopeHosts: normalised hosts
	domains          map[string]bool // ScopeDomain: registrable domains
	include, exclude *regexp.Regexp
}

// NewScope checks c and returns an empty scope of its kind. Errors are EINVALID naming
// the flag's field (scope, scope_host_list, scope_include, scope_exclude).
func NewScope(c ScopeConfig) (*Scope, error) {
	s := &Scope{kind: c.Kind, hosts: map[string]bool{}, domains: map[string]bool{}}
	switch c.Kind {
	case "":
		s.kind = ScopeHost
	case ScopeHost, ScopeDomain, ScopePattern:
	case ScopeHosts:
		if len(c.HostList) == 0 {
			return nil, downloader.Invalidf("scope_host_list", "--scope hosts needs --scope-host-list")
		}
	default:
		return nil, downloader.Invalidf("scope", "--scope must be one of host, domain, hosts, pattern, not %q", c.Kind)
	}
	if len(c.HostList) > 0 && s.kind != ScopeHosts {
		return nil, downloader.Invalidf("scope_host_list", "--scope-host-list needs --scope hosts")
	}
	for _, h := range c.HostList {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		d, err := downloader.CanonicalHost(h)
		if err != nil {
			return nil, downloader.Invalidf("scope_host_list", "--scope-host-list: %s", downloader.ErrorMessage(err))
		}
		s.hosts[d] = true
	}
	var err error
	if c.Include != "" {
		if s.include, err = regexp.Compile(c.Include); err != nil {
			return nil, downloader.Invalidf("scope_include", "--scope-include: %v", err)
		}
	} else if s.kind == ScopePattern {
		return nil, downloader.Invalidf("scope_include", "--scope pattern needs --scope-include")
	}
	if c.Exclude != "" {
		if s.exclude, err = regexp.Compile(c.Exclude); err != nil {
			return nil, downloader.Invalidf("scope_exclude", "--scope-exclude: %v", err)
		}
	}
	return s, nil
}

// AddSeed widens a host or domain scope to the seed's host or registrable domain; the
// other kinds ignore seeds. domain is the seed's normalised host.
func (s *Scope) AddSeed(domain string) {
	switch s.kind {
	case ScopeHost:
		s.hosts[domain] = true
	case ScopeDomain:
		s.domains[registrable(domain)] = true
	}
}

// Allows reports whether the canonical URL u, of normalised host domain, is in scope.
func (s *Scope) Allows(u string, domain string) bool {
	if !s.AllowsHost(domain) {
		return false
	}
	if s.include != nil && !s.include.MatchString(u) {
		return false
	}
	return s.exclude == nil || !s.exclude.MatchString(u)
}

// AllowsHost reports whether the kind's host rule lets the normalised host domain in (the
// patterns aside).
func (s *Scope) AllowsHost(domain string) bool {
	switch s.kind {
	case ScopeHost, ScopeHosts:
		return s.hosts[domain]
	case ScopeDomain:
		return s.domains[registrable(domain)]
	}
	return true
}

// String describes the scope for the crawl's first lines.
func (s *Scope) String() string {
	var set map[string]bool
	switch s.kind {
	case ScopeHost, ScopeHosts:
		set = s.hosts
	case ScopeDomain:
		set = s.domains
	}
	out := string(s.kind)
	if set != nil {
		out += fmt.Sprintf(" (%d)", len(set))
	}
	if s.include != nil {
		out += " include " + s.include.String()
	}
	if s.exclude != nil {
		out += " exclude " + s.exclude.String()
	}
	return out
}

// registrable is the host's registrable domain (eTLD+1); a host that has none (an IP
// literal, a public suffix itself, a single label such as localhost) is its own.
func registrable(host string) string {
	if d, err := publicsuffix.EffectiveTLDPlusOne(host); err == nil {
		return d
	}
	return host
}

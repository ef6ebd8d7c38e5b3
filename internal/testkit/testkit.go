// Package testkit holds the test doubles that several packages' tests share, so that each
// is written once: resolvers that never touch the network, an in-memory settings store,
// a fake cluster runtime, a child process's stderr that wakes its waiters, and the
// scheme-redirect table of fetch's and render's tests. Only tests import it.
//
// It imports only the root package (the cluster types are its vocabulary), so the tests
// of any package but the root may use it.
package testkit

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"downloader"
)

// Resolver answers name lookups from a table and never touches the network: Errs first,
// then Answers, and an unknown name is NXDOMAIN. It counts the lookups of each name.
// Safe for concurrent use; set the tables before the first lookup.
type Resolver struct {
	Answers map[string][]netip.Addr
	Errs    map[string]error

	mu    sync.Mutex
	calls map[string]int
}

// LookupNetIP is netguard's resolver method.
func (r *Resolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[host]++
	if err, ok := r.Errs[host]; ok {
		return nil, err
	}
	if a, ok := r.Answers[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// Count returns how many times host was looked up.
func (r *Resolver) Count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host]
}

// NoResolver refuses every lookup, for tests whose every host is mapped by a connect-to
// rule: a lookup is a bug, and fails T when T is set.
type NoResolver struct{ T testing.TB }

// LookupNetIP is netguard's resolver method.
func (r NoResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if r.T != nil {
		r.T.Errorf("test resolver asked for %s", host)
	}
	return nil, errors.New("test resolver: no lookups")
}

// SettingsStore is an in-memory downloader.SettingsStore. Safe for concurrent use; the
// zero value holds no settings.
type SettingsStore struct {
	mu sync.Mutex
	s  *downloader.Settings
}

var _ downloader.SettingsStore = (*SettingsStore)(nil)

// Settings returns the saved settings, ok false before the first save.
func (m *SettingsStore) Settings(context.Context) (downloader.Settings, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.s == nil {
		return downloader.Settings{}, false, nil
	}
	return *m.s, true, nil
}

// SaveSettings keeps s.
func (m *SettingsStore) SaveSettings(_ context.Context, s downloader.Settings) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.s = &s
	return nil
}

// Cluster is a shared runtime with a cluster view, as store/tikv's Runtime is: it admits
// every request at once (a second's wait), its cluster-wide cap is MaxConcurrent, and it
// shows the instances and domains it is given. Safe for concurrent use; change InstanceList,
// DomainRecords and Err under Mu once it is in use (or with Set).
type Cluster struct {
	ID            string // InstanceID; default "dl-2"
	MaxConcurrent int    // MaxConcurrentCount; default 12

	Mu            sync.Mutex
	InstanceList  []downloader.ClusterInstance
	DomainRecords map[string]downloader.ClusterDomain
	Err           error // returned by the views
}

var (
	_ downloader.SharedRuntime = (*Cluster)(nil)
	_ downloader.ClusterView   = (*Cluster)(nil)
)

// Set replaces the instance list and the views' error.
func (f *Cluster) Set(instances []downloader.ClusterInstance, err error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.InstanceList, f.Err = instances, err
}

// Admit admits at once, with no ticket.
func (f *Cluster) Admit(context.Context, downloader.SharedAdmit) (downloader.SharedTicket, time.Duration, error) {
	return nil, time.Second, nil
}

// MaxConcurrentCount is the cluster-wide cap.
func (f *Cluster) MaxConcurrentCount() int {
	if f.MaxConcurrent == 0 {
		return 12
	}
	return f.MaxConcurrent
}

// ApplyMaxConcurrentCount ignores the change.
func (f *Cluster) ApplyMaxConcurrentCount(int) {}

// InstanceID is this instance's id.
func (f *Cluster) InstanceID() string {
	if f.ID == "" {
		return "dl-2"
	}
	return f.ID
}

// Instances returns the instance list given.
func (f *Cluster) Instances(context.Context) ([]downloader.ClusterInstance, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.InstanceList, f.Err
}

// Domain returns the domain's record given (the zero record, not stored, if none).
func (f *Cluster) Domain(_ context.Context, d string) (downloader.ClusterDomain, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.DomainRecords[d], f.Err
}

// SettingsService is a fake of the runtime settings as the HTTP server and the console see
// them (server.SettingsService, console.SettingsService): a struct of function fields, so
// a test sets only the calls it expects.
type SettingsService struct {
	SettingsFn           func() downloader.Settings
	SetSettingsFn        func(ctx context.Context, s downloader.Settings, actor string) (downloader.Settings, error)
	DefaultMinIntervalFn func() time.Duration
}

// Settings calls SettingsFn.
func (f *SettingsService) Settings() downloader.Settings { return f.SettingsFn() }

// SetSettings calls SetSettingsFn.
func (f *SettingsService) SetSettings(ctx context.Context, s downloader.Settings, actor string) (downloader.Settings, error) {
	return f.SetSettingsFn(ctx, s, actor)
}

// DefaultMinInterval calls DefaultMinIntervalFn.
func (f *SettingsService) DefaultMinInterval() time.Duration { return f.DefaultMinIntervalFn() }

// ClusterView is a fake of the cluster-wide view (server.ClusterView, console.ClusterView)
// made of function fields.
type ClusterView struct {
	InstanceIDFn func() string
	InstancesFn  func(ctx context.Context) ([]downloader.ClusterInstance, error)
	DomainFn     func(ctx context.Context, domain string) (downloader.ClusterDomain, error)
}

// InstanceID calls InstanceIDFn.
func (f *ClusterView) InstanceID() string { return f.InstanceIDFn() }

// Instances calls InstancesFn.
func (f *ClusterView) Instances(ctx context.Context) ([]downloader.ClusterInstance, error) {
	return f.InstancesFn(ctx)
}

// Domain calls DomainFn.
func (f *ClusterView) Domain(ctx context.Context, domain string) (downloader.ClusterDomain, error) {
	return f.DomainFn(ctx, domain)
}

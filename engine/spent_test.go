package engine

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"downloader"
	"downloader/clock/clocktest"
	"downloader/fetch"
	"downloader/limiter"
	"downloader/netguard"
)

// spentResolver answers without any network: nx.test is NXDOMAIN, servfail.test a failing
// resolver, private.test a private address; the rest are mapped by connect-to rules.
type spentResolver struct{}

func (spentResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	switch host {
	case "servfail.test":
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	case "private.test":
		return []netip.Addr{netip.MustParseAddr("10.0.0.7")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestEntriesSpendTheSlotOnlyWhenSent is SPEC §2's spent slot through the engine, for each
// entry: a request whose connection was attempted (here refused by the peer) spends its
// domain's slot, so the next one waits a full interval; one refused before any packet (DNS
// failure, NXDOMAIN, the SSRF guard) gives it back, so the next may go at once.
func TestEntriesSpendTheSlotOnlyWhenSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens: connection refused
	rule, err := netguard.ParseConnectTo("refused.test::" + closed)
	if err != nil {
		t.Fatal(err)
	}
	guard := netguard.New(netguard.Config{ConnectTo: []netguard.Rule{rule}, Resolver: spentResolver{}})
	f := fetch.New(fetch.Config{Guard: guard})
	t.Cleanup(f.Close)

	const iv = time.Minute
	tests := []struct {
		domain  string
		reason  downloader.FailReason
		isSpent bool
	}{
		{"refused.test", downloader.FailConnectRefused, true},
		{"nx.test", downloader.FailDomainNotFound, false},
		{"servfail.test", downloader.FailResolverUnavailable, false},
		{"private.test", downloader.FailDestinationForbidden, false},
	}
	entries := []downloader.Entry{downloader.EntryLease, downloader.EntryRender, downloader.EntryProbe}
	for _, tt := range tests {
		for _, entry := range entries {
			t.Run(tt.domain+"/"+string(entry), func(t *testing.T) {
				clk := clocktest.NewFake(time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC))
				lim := limiter.New(clk)
				clk.Advance(time.Hour)
				e := New(Config{Clock: clk, Limiter: lim, Gate: limiter.NewGate(8, 8), Fetcher: causeChecked{t: t, f: f},
					DefaultMinInterval: iv, DefaultTimeout: 10 * time.Second})
				raw := "http://" + tt.domain + "/"
				u, _ := url.Parse(raw)
				req := downloader.Request{URL: raw, Domain: tt.domain, MinInterval: iv, IntervalSource: downloader.IntervalSourceRequest}
				var s downloader.Summary
				switch entry {
				case downloader.EntryLease:
					out := e.RunTask(context.Background(), &downloader.Task{TaskID: "t1", URL: raw, MinIntervalMs: ms(iv.Milliseconds())})
					if out.Report == nil {
						t.Fatalf("task handed back: %+v", out)
					}
					s = out.Report.Summary
				case downloader.EntryRender:
					res, err := e.Render(context.Background(), req, u)
					if err != nil {
						t.Fatalf("render refused: %v", err)
					}
					s = res.Summary
				case downloader.EntryProbe:
					s = e.Probe(context.Background(), req, u)
				}
				var got downloader.FailReason
				if s.FailReason != nil {
					got = *s.FailReason
				}
				if got != tt.reason {
					t.Errorf("fail_reason %q, want %q", got, tt.reason)
				}
				next, wait := lim.Allow(clk.Now(), tt.domain, iv, downloader.IntervalSourceRequest, downloader.EntryProbe)
				next.Cancel()
				switch {
				case tt.isSpent && wait != iv:
					t.Errorf("next request's wait %v, want %v: a connection was attempted", wait, iv)
				case !tt.isSpent && wait != 0:
					t.Errorf("next request's wait %v, want 0: nothing was sent", wait)
				}
			})
		}
	}
}

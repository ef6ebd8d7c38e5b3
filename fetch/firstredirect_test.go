package fetch

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"downloader"
	"downloader/clock"
	"downloader/internal/testkit"
	"downloader/limiter"
	"downloader/netguard"
	"downloader/origintest"
)

// intervalHops admits hops as the engine does: Wait with the domain's latest interval.
type intervalHops struct{ l *limiter.Limiter }

func (h intervalHops) AdmitHop(ctx context.Context, domain string) (limiter.Admission, error) {
	iv, src, _ := h.l.IntervalOf(domain)
	return h.l.Wait(ctx, domain, iv, src, downloader.EntryProbe)
}

// startedEarlier is the real clock, but its first reading is an hour ago: a limiter made
// with it counts its table as lost then, so a fresh domain is admitted at once.
type startedEarlier struct{ read atomic.Bool }

func (c *startedEarlier) Now() time.Time {
	if c.read.CompareAndSwap(false, true) {
		return time.Now().Add(-time.Hour)
	}
	return time.Now()
}

func (c *startedEarlier) NewTimer(d time.Duration) clock.Timer { return clock.Real{}.NewTimer(d) }

// infoDialer dials loopback and keeps each connection's TCP_INFO as it was when closed.
type infoDialer struct {
	mu    sync.Mutex
	open  map[string]*net.TCPConn
	infos map[string]unix.TCPInfo // by local address
}

func (d *infoDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	d.mu.Lock()
	d.open[tc.LocalAddr().String()] = tc
	d.mu.Unlock()
	return &infoConn{TCPConn: tc, d: d}, nil
}

func tcpInfoOf(c *net.TCPConn) (unix.TCPInfo, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return unix.TCPInfo{}, false
	}
	var info *unix.TCPInfo
	var ierr error
	rc.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if ierr != nil || info == nil {
		return unix.TCPInfo{}, false
	}
	return *info, true
}

func (d *infoDialer) info(local string) (unix.TCPInfo, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if i, ok := d.infos[local]; ok {
		return i, true
	}
	if c := d.open[local]; c != nil {
		return tcpInfoOf(c)
	}
	return unix.TCPInfo{}, false
}

type infoConn struct {
	*net.TCPConn
	d    *infoDialer
	once sync.Once
}

func (c *infoConn) Close() error {
	c.once.Do(func() {
		i, ok := tcpInfoOf(c.TCPConn)
		c.d.mu.Lock()
		if ok {
			c.d.infos[c.LocalAddr().String()] = i
		}
		delete(c.d.open, c.LocalAddr().String())
		c.d.mu.Unlock()
	})
	return c.TCPConn.Close()
}

// tcpCounters reads the kernel's TCP counters named (from /proc/net/snmp and netstat).
func tcpCounters(names ...string) map[string]int64 {
	out := map[string]int64{}
	for _, p := range []string{"/proc/net/snmp", "/proc/net/netstat"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i+1 < len(lines); i += 2 {
			h, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			for j := 1; j < len(h) && j < len(v); j++ {
				for _, n := range names {
					if h[j] == n {
						out[n], _ = strconv.ParseInt(v[j], 10, 64)
					}
				}
			}
		}
	}
	return out
}

// TestSameHostRedirectFirstRequests: the first request ever to each of many fresh domains
// redirects to its own host; the hop must reach the origin an interval after the first
// request did, through Fetch (entry B: the hop reuses the connection) and FetchOnce
// (entry C: Connection: close, the hop dials anew), with busy goroutines on every P. Both
// sides are recorded, so a violation says who is wrong: the limiter's wire moments
// (ObserveWire) and the origin's kernel receive times, with each client connection's
// TCP_INFO (a retransmitted request is received late) and the kernel's TCP counters.
// The bounds hold by causality, not timing: the origin stamps a request in the client's
// write (loopback), no later than the wire moment told after it, and the limiter lets a
// hop out no earlier than an interval after that moment. REDIR_STRESS_DOMAINS=n runs n
// domains (many iterations: n=1500, -cpu 1,2).
func TestSameHostRedirectFirstRequests(t *testing.T) {
	domainCount, workers := 120, 12
	if s := os.Getenv("REDIR_STRESS_DOMAINS"); s != "" {
		domainCount, _ = strconv.Atoi(s)
	}
	const interval = 100 * time.Millisecond
	var withBody atomic.Int64
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
			withBody.Add(1)
		}
		if r.URL.Path == "/redir" {
			http.Redirect(w, r, "/landed", http.StatusMovedPermanently)
			return
		}
		origintest.Page(w, r)
	}))
	defer origin.Close()

	// The table counts as lost an hour ago: every fresh domain may be asked at once.
	l := limiter.New(&startedEarlier{})
	var wmu sync.Mutex
	wires := map[string][]time.Time{}
	l.ObserveWire(func(domain string, _ time.Duration, at time.Time) {
		wmu.Lock()
		wires[domain] = append(wires[domain], at)
		wmu.Unlock()
	})
	dialer := &infoDialer{open: map[string]*net.TCPConn{}, infos: map[string]unix.TCPInfo{}}
	rule, err := netguard.ParseConnectTo("*.test::" + origin.Addr())
	if err != nil {
		t.Fatal(err)
	}
	f := New(Config{Guard: netguard.New(netguard.Config{
		Resolver: &testkit.Resolver{Answers: map[string][]netip.Addr{}}, Dialer: dialer,
		ConnectTo: []netguard.Rule{rule}})})
	defer f.Close()

	counterNames := []string{"RetransSegs", "TCPTimeouts", "TCPLossProbes", "ListenOverflows", "TCPSynRetrans"}
	before := tcpCounters(counterNames...)

	var stop atomic.Bool
	var busy sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		busy.Go(func() {
			for !stop.Load() {
				for i := 0; i < 1e5; i++ {
					_ = i * i
				}
			}
		})
	}
	next := make(chan int, domainCount)
	for i := range domainCount {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				domain := fmt.Sprintf("r%05d.test", i)
				u, _ := url.Parse("http://" + domain + "/redir")
				adm, wait := l.Allow(time.Now(), domain, interval, downloader.IntervalSourceRequest, downloader.EntryProbe)
				if wait > 0 {
					t.Errorf("%s: a fresh domain was refused", domain)
					continue
				}
				var out *downloader.Outcome
				if i%2 == 0 {
					out = f.Fetch(context.Background(), u, &adm, intervalHops{l})
				} else {
					out = f.FetchOnce(context.Background(), u, &adm, intervalHops{l})
				}
				adm.Cancel()
				if out.FailReason != "" || out.HealthSignal.RedirectCount != 1 {
					t.Errorf("%s: %q after %d hops", domain, out.FailReason, out.HealthSignal.RedirectCount)
				}
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	busy.Wait()
	after := tcpCounters(counterNames...)
	for _, n := range counterNames {
		t.Logf("kernel %s +%d", n, after[n]-before[n])
	}

	// A request with a body can go out in two writes (net/http sends a body it cannot
	// size at once as chunked, headers first): then it arrives in pieces, and its wire
	// moment is only its first.
	if n := withBody.Load(); n > 0 {
		t.Errorf("%d requests came with a body: a GET goes without one", n)
	}
	byHost := map[string][]origintest.Arrival{}
	for _, a := range origin.Arrivals() {
		byHost[a.Host] = append(byHost[a.Host], a)
	}
	var late []time.Duration // how far after the client's wire moment the origin stamped
	violations := 0
	for i := range domainCount {
		domain := fmt.Sprintf("r%05d.test", i)
		as, ws := byHost[domain], wires[domain]
		if len(as) != 2 || len(ws) != 2 {
			t.Errorf("%s: %d arrivals, %d wire moments, want 2 of each", domain, len(as), len(ws))
			continue
		}
		sort.Slice(as, func(i, j int) bool { return as[i].At.Before(as[j].At) })
		sort.Slice(ws, func(i, j int) bool { return ws[i].Before(ws[j]) })
		for k := range 2 {
			late = append(late, as[k].At.Sub(ws[k].Round(0)))
		}
		originGap, clientGap := as[1].At.Sub(as[0].At), ws[1].Sub(ws[0])
		if clientGap < interval {
			t.Errorf("%s: the limiter let the hop out %v after the first request (< %v)", domain, clientGap, interval)
		}
		if originGap < interval-2*time.Millisecond {
			violations++
			t.Errorf("%s (%s): the origin saw the hop %v after the first request (< %v); client gap %v", domain,
				map[bool]string{true: "Fetch", false: "FetchOnce"}[i%2 == 0], originGap, interval, clientGap)
			for k, a := range as {
				info, ok := dialer.info(a.Remote)
				t.Logf("  %s stamped %s, wire moment %s (stamp-wire %v) on %s: tcp_info ok=%v total_retrans=%d data_segs_out=%d segs_out=%d rto=%dus rtt=%dus",
					a.Path, a.At.Format("15:04:05.000000"), ws[k].Format("15:04:05.000000"), a.At.Sub(ws[k].Round(0)),
					a.Remote, ok, info.Total_retrans, info.Data_segs_out, info.Segs_out, info.Rto, info.Rtt)
			}
		}
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	if len(late) > 0 {
		t.Logf("origin stamp minus client wire moment over %d requests: min %v median %v p99 %v max %v", len(late),
			late[0], late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
	}
	t.Logf("%d of %d domains with a violation at the origin", violations, domainCount)
}

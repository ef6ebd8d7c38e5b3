package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"
)

// maxPolitenessRows bounds the politeness table.
const maxPolitenessRows = 15

// wireLog is a crawl's record, per domain, of the requests the limiter let out (their
// wire moments, limiter.ObserveWire): main documents and redirect hops of every entry,
// plain and rendered, over TLS or not. A render's own sub-requests (scripts, XHRs) are not
// in it: they ride on their page's one admission (SPEC §2, §3), so counting them as page
// requests would report gaps below the interval that the limiter never allowed. It keeps
// every moment (8 bytes a request), so a long-running serve does not use it. Safe for
// concurrent use; its zero value is ready.
type wireLog struct {
	mu      sync.Mutex
	base    time.Time // the first moment observed; moments are kept as offsets from it
	domains map[string]*wireStat
}

type wireStat struct {
	at       []time.Duration // since base, in the order told
	interval time.Duration   // of the latest request
}

// domainGap is one domain's row of the politeness table.
type domainGap struct {
	domain       string
	requestCount int
	minGap       time.Duration // the smallest start-to-start gap; 0 with fewer than two
	minInterval  time.Duration // the interval of the domain's latest request
}

// observe is the limiter's wire observer: one request to domain went out at at.
func (l *wireLog) observe(domain string, interval time.Duration, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.domains == nil {
		l.domains = map[string]*wireStat{}
		l.base = at
	}
	st := l.domains[domain]
	if st == nil {
		st = &wireStat{}
		l.domains[domain] = st
	}
	st.at = append(st.at, at.Sub(l.base))
	st.interval = interval
}

// rows returns every domain's row, in no particular order. The moments are sorted first:
// the limiter tells them outside its locks, so two may arrive out of order.
func (l *wireLog) rows() []domainGap {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]domainGap, 0, len(l.domains))
	for d, st := range l.domains {
		g := domainGap{domain: d, requestCount: len(st.at), minInterval: st.interval}
		at := slices.Clone(st.at)
		slices.Sort(at)
		for i := 1; i < len(at); i++ {
			if gap := at[i] - at[i-1]; i == 1 || gap < g.minGap {
				g.minGap = gap
			}
		}
		out = append(out, g)
	}
	return out
}

// printPoliteness writes the politeness table, tightest domain first.
func printPoliteness(w io.Writer, gaps []domainGap) {
	if len(gaps) == 0 {
		return
	}
	// Tightest first: the gap relative to the interval.
	ratio := func(g domainGap) float64 {
		if g.requestCount < 2 {
			return 1e18
		}
		if g.minInterval <= 0 {
			return 1e17
		}
		return float64(g.minGap) / float64(g.minInterval)
	}
	sort.Slice(gaps, func(i, j int) bool {
		if ri, rj := ratio(gaps[i]), ratio(gaps[j]); ri != rj {
			return ri < rj
		}
		return gaps[i].domain < gaps[j].domain
	})
	fmt.Fprintln(w)
	fmt.Fprintln(w, "politeness: smallest gap between two requests the limiter let out to a domain in this run (main documents and redirect hops; a render's sub-requests ride on its page's admission)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  domain\trequests\tmin gap\tmin_interval_ms\t")
	below := 0
	for i, g := range gaps {
		if g.requestCount >= 2 && g.minGap < g.minInterval {
			below++
		}
		if i >= maxPolitenessRows {
			continue
		}
		gap := "—"
		if g.requestCount >= 2 {
			gap = fmt.Sprintf("%.1f ms", float64(g.minGap)/float64(time.Millisecond))
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t\n", g.domain, g.requestCount, gap, g.minInterval.Milliseconds())
	}
	_ = tw.Flush()
	if len(gaps) > maxPolitenessRows {
		fmt.Fprintf(w, "  … %d more domains\n", len(gaps)-maxPolitenessRows)
	}
	fmt.Fprintf(w, "  domains with a gap below their interval: %d of %d\n", below, len(gaps))
}

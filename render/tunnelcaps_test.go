package render

import (
	"testing"

	"downloader/clock"
)

// TestAdmitTunnel: the rule of a CONNECT (tunnelcaps.go). With a pauser, a tunnel with a
// credit (an https request the pauser let go on) is not counted again, and any other,
// the page's own host's included, is a sub-request under the caps, counted in the health
// signal; without one, the page's own host's tunnels carry its documents and go on, any
// other host's are sub-requests.
func TestAdmitTunnel(t *testing.T) {
	type step struct {
		credit string // the pauser let an https request to it go on (no CONNECT)
		tunnel string // a CONNECT to it
		want   bool
	}
	tests := []struct {
		name         string
		paused       bool
		caps         subrequestCaps
		steps        []step
		sub, refused int // the health signal's tunnel counts
		capped       int
	}{
		{"with a pauser: a credit each, then the per-host cap", true, subrequestCaps{total: 100, perHost: 2}, []step{
			{credit: "other.test"}, {credit: "other.test"},
			{tunnel: "other.test", want: true}, {tunnel: "other.test", want: true}, // the credits
			{tunnel: "other.test", want: true}, {tunnel: "other.test", want: true}, // counted: the cap's 2
			{tunnel: "other.test", want: false},
		}, 3, 1, 1},
		{"with a pauser: the page's own host under the total", true, subrequestCaps{total: 2, perHost: 1}, []step{
			{credit: "page.test"}, {tunnel: "page.test", want: true}, // the main document's
			{tunnel: "page.test", want: true}, {tunnel: "page.test", want: true}, {tunnel: "page.test", want: false},
		}, 3, 1, 1},
		{"with a pauser: a credit serves its own host only", true, subrequestCaps{total: 10, perHost: 1}, []step{
			{credit: "cdn.test"}, {tunnel: "other.test", want: true}, {tunnel: "other.test", want: false}, {tunnel: "cdn.test", want: true},
		}, 2, 1, 1},
		{"without a pauser: the page's host free, others counted", false, subrequestCaps{total: 10, perHost: 1}, []step{
			{tunnel: "page.test", want: true}, {tunnel: "page.test", want: true},
			{tunnel: "other.test", want: true}, {tunnel: "other.test", want: false},
		}, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newRenderState(clock.Real{}, "page.test", nil)
			st.caps = tt.caps
			if tt.paused {
				st.countsAtPauser()
			}
			for i, s := range tt.steps {
				if s.credit != "" {
					st.creditTunnel(s.credit)
					continue
				}
				if got := st.admitTunnel(s.tunnel); got != s.want {
					t.Errorf("step %d: tunnel to %s admitted=%v, want %v", i, s.tunnel, got, s.want)
				}
			}
			if sub, refused := st.tunnelCounts(); sub != tt.sub || refused != tt.refused {
				t.Errorf("tunnel counts: sub=%d refused=%d, want %d, %d", sub, refused, tt.sub, tt.refused)
			}
			if got := st.guardCounts().capped; got != tt.capped {
				t.Errorf("capped=%d, want %d", got, tt.capped)
			}
		})
	}
}

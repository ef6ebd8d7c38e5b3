package observe

import "time"

// Hour is one hour of the 24 h window, for the console's charts.
type Hour struct {
	// StartAt is the start of the hour (UTC); the newest hour is the current, partial one.
	StartAt time.Time `json:"start_at"`
	// RequestCount counts the requests of every entry, as request_24h_count does.
	RequestCount uint64 `json:"request_count"`
	// OverLimitCount counts the over-limit events (limit triggers) of every entry.
	OverLimitCount uint64 `json:"over_limit_count"`
	// ProbeReachedCount and ProbeNotReachedCount split the probes by has_reached_origin.
	ProbeReachedCount    uint64 `json:"probe_reached_count"`
	ProbeNotReachedCount uint64 `json:"probe_not_reached_count"`
	// RenderCount counts the finished renders (should_render=true) that took any time;
	// MeanRenderMs is their mean service time, null in an hour without one.
	RenderCount  uint64   `json:"render_count"`
	MeanRenderMs *float64 `json:"mean_render_ms"`
}

// Hours returns the HourBuckets hours of the 24 h window at now, oldest first, empty
// hours included (at zero), so that a chart has one bar per hour.
func (o *Observer) Hours(now time.Time) []Hour {
	out := make([]Hour, 0, HourBuckets)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.hours.buckets(now, func(start time.Time, h *hourCounts) {
		x := Hour{StartAt: start}
		if h != nil {
			for e := range entryCount {
				x.RequestCount += h.requests[e]
				x.OverLimitCount += h.overLimit[e]
			}
			x.ProbeNotReachedCount = h.notReached
			x.ProbeReachedCount = h.probes - h.notReached
			x.RenderCount = h.renderCount
			if h.renderCount > 0 {
				m := float64(h.renderNs) / float64(h.renderCount) / float64(time.Millisecond)
				x.MeanRenderMs = &m
			}
		}
		out = append(out, x)
	})
	return out
}

package limiter

import "time"

// windowHours is the span of every rolling count: the console shows the last 24 hours.
const windowHours = 24

// window counts events per hour over the last 24 hours in fixed memory (100 bytes). The
// zero value is ready to use. Not safe for concurrent use: the owner's lock guards it.
type window struct {
	latest int32 // hour index of the newest slot written
	slots  [windowHours]uint32
}

func newWindow() window { return window{} }

// hourOf returns the hour index of a limiter instant.
func hourOf(ns int64) int32 { return int32(ns / int64(time.Hour)) }

// add counts n events in hour h. Events older than the newest written hour are counted in
// their own slot if it is still inside the window, else dropped.
func (w *window) add(h int32, n uint32) {
	switch {
	case h > w.latest:
		gap := h - w.latest
		if gap >= windowHours {
			w.slots = [windowHours]uint32{}
		} else {
			for k := w.latest + 1; k <= h; k++ {
				w.slots[k%windowHours] = 0
			}
		}
		w.latest = h
	case w.latest-h >= windowHours:
		return
	}
	w.slots[h%windowHours] += n
}

// sum returns the events of the 24 hours ending with hour h.
func (w *window) sum(h int32) uint64 {
	if h-w.latest >= windowHours {
		return 0
	}
	var total uint64
	for k := max(w.latest-windowHours+1, h-windowHours+1); k <= w.latest; k++ {
		if k < 0 {
			continue
		}
		total += uint64(w.slots[k%windowHours])
	}
	return total
}

// isEmpty reports whether the window holds no event of the 24 hours ending with hour h.
func (w *window) isEmpty(h int32) bool { return w.sum(h) == 0 }

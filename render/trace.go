package render

import "time"

// Trace is told of events inside a pool, as net/http/httptrace's ClientTrace is of a
// request's: for metrics, benchmarks and tests, which count or wait on them. A nil Trace,
// and a nil field, are told nothing. The pool calls the functions from its own
// goroutines, several at once: they must be safe for concurrent use and return quickly
// (the tab, the render or the browser connection that calls one waits for it).
type Trace struct {
	// CDPMessagef is told every CDP message the local browser's connection sends
	// ("-> {...}") and receives, in chromedp's debug format (chromedp.WithDebugf): set, it
	// makes chromedp format each message, which costs CPU on every call.
	CDPMessagef func(format string, args ...any)
	// TabWiped is told how long each wipe between two renders of a long-lived tab took
	// (IsolationWipe).
	TabWiped func(took time.Duration)
	// TabTaken is told how long each render waited for its tab: from asking for one to
	// having it, a spare's wipe or a new tab's making included.
	TabTaken func(waited time.Duration)
	// AffinityWaitStarted is told when a render starts to wait for its site's long-lived
	// context (affinity.go), with the site.
	AffinityWaitStarted func(site string)
}

func (t *Trace) tabWiped(took time.Duration) {
	if t != nil && t.TabWiped != nil {
		t.TabWiped(took)
	}
}

func (t *Trace) tabTaken(waited time.Duration) {
	if t != nil && t.TabTaken != nil {
		t.TabTaken(waited)
	}
}

func (t *Trace) affinityWaitStarted(site string) {
	if t != nil && t.AffinityWaitStarted != nil {
		t.AffinityWaitStarted(site)
	}
}

// cdpMessagef is the function chromedp is given for its debug messages; nil: none.
func (t *Trace) cdpMessagef() func(format string, args ...any) {
	if t == nil {
		return nil
	}
	return t.CDPMessagef
}

package downloader

import "time"

// The engine's report of what it did, in the root so that its consumers (observe,
// metrics, lease, robots) read it without importing the engine.

// Observer is told about every finished request and every over-limit event, for metrics,
// logs and the console. Implementations must be fast and safe for concurrent use.
type Observer interface {
	Observe(ev *Event)
}

// Event is one finished request or one over-limit refusal.
type Event struct {
	At             time.Time
	Entry          Entry
	URL            string
	Domain         string
	ShouldRender   bool
	MinInterval    time.Duration
	IntervalSource IntervalSource
	// OverLimit is set when the limiter or the global cap refused or delayed the request.
	OverLimit bool
	// Paced is set instead of OverLimit when entry A's task was handed out by a source
	// that paces per domain (Task.IsPaced) and waited at the limiter for its slot: the
	// queue's own pacing, counted apart and never as over limit.
	Paced bool
	// Delay is how long entry A's task was delayed, or the wait a refusal announced.
	Delay    time.Duration
	Summary  Summary
	Duration time.Duration // service time, for finished requests
	TaskID   string
}

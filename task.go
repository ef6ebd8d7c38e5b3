package downloader

import (
	"math"
	"time"
)

// Task is one unit of entry A's work, as leased from the scheduler or the local queue
// (docs/scheduler-contract.md). MinIntervalMs is a pointer so that a missing value (an
// invalid task) is told apart from zero.
type Task struct {
	TaskID         string    `json:"task_id"`
	URL            string    `json:"url"`
	Domain         string    `json:"domain"`
	MinIntervalMs  *int64    `json:"min_interval_ms"`
	ShouldRender   bool      `json:"should_render"`
	ShouldStore    bool      `json:"should_store"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	// RequestHeaders are the task's allow-listed request headers (HeaderPolicy).
	RequestHeaders RequestHeaders `json:"request_headers,omitempty"`
	// IsPaced is set, never on the wire, by a source that spaces each domain's tasks by
	// their interval itself (the local queue): it handed the task out at its domain's
	// slot, so a wait at the limiter is that pacing, not an over-limit event (an entry A
	// "delay" counts only when a scheduler let a task out early).
	IsPaced bool `json:"-"`
}

// Report is what entry A tells the scheduler about a finished task: the lean summary plus
// the task's identity and where its page went. Never the page itself.
type Report struct {
	TaskID string `json:"task_id"`
	Summary
	FetchedAt time.Time `json:"fetched_at"`
	PageKey   string    `json:"page_key,omitempty"`
	// SkipReason is set when the task was not fetched on purpose, by the standalone crawl's
	// local queue only (robots.txt, SPEC §1: the queue plays the sampler's part there). It
	// is not a fail_reason: the closed set of SPEC §4 stays as it is, and a real scheduler
	// never sees one.
	SkipReason SkipReason `json:"skip_reason,omitempty"`
}

// SkipReason says why the local queue's crawl did not fetch a task.
type SkipReason string

const (
	// SkipRobotsDisallowed: the site's robots.txt disallows the URL for our User-Agent.
	SkipRobotsDisallowed SkipReason = "robots_disallowed"
	// SkipRobotsUnavailable: the site's robots.txt answered 5xx (or 429) on every try,
	// which RFC 9309 §2.3.1.4 reads as a complete disallow.
	SkipRobotsUnavailable SkipReason = "robots_unavailable"
)

// TaskState is a local-queue task's state as the task status API names it.
type TaskState string

const (
	TaskQueued  TaskState = "queued"  // waiting to run, maybe out a retry backoff (next_attempt_at)
	TaskLeased  TaskState = "leased"  // being run
	TaskDone    TaskState = "done"    // finished with a success
	TaskFailed  TaskState = "failed"  // finished with a fail_reason, for good
	TaskSkipped TaskState = "skipped" // never fetched, on purpose (skip_reason)
)

// TaskStates lists every state in display order.
var TaskStates = [...]TaskState{TaskQueued, TaskLeased, TaskDone, TaskFailed, TaskSkipped}

// IsValid reports whether s is one of TaskStates.
func (s TaskState) IsValid() bool {
	for _, v := range TaskStates {
		if s == v {
			return true
		}
	}
	return false
}

// TaskStatus is one task of the embedded local queue as GET /v1/tasks/{task_id} shows it:
// its fields, its state, how many attempts reached the origin, and the last outcome.
// Fields of the outcome are null before the first report.
type TaskStatus struct {
	TaskID        string    `json:"task_id"`
	URL           string    `json:"url"`
	Domain        string    `json:"domain"`
	MinIntervalMs *int64    `json:"min_interval_ms"`
	ShouldRender  bool      `json:"should_render"`
	ShouldStore   bool      `json:"should_store"`
	State         TaskState `json:"state"`
	// AttemptCount counts the attempts that reached the origin; OwnFailureCount the
	// failures of our own (has_reached_origin=false) retried in place, which are not
	// attempts (seed 002).
	AttemptCount     int         `json:"attempt_count"`
	OwnFailureCount  int         `json:"own_failure_count"`
	FailReason       *FailReason `json:"fail_reason"`
	HTTPStatus       *int        `json:"http_status"`
	HasReachedOrigin *bool       `json:"has_reached_origin"`
	SkipReason       *SkipReason `json:"skip_reason"`
	PageKey          string      `json:"page_key,omitempty"`
	SubmittedAt      time.Time   `json:"submitted_at"`
	FetchedAt        *time.Time  `json:"fetched_at"`       // of the last report
	NextAttemptAt    *time.Time  `json:"next_attempt_at"`  // while waiting out a backoff
	LeaseExpiresAt   *time.Time  `json:"lease_expires_at"` // while leased
}

// LeaseReply is what entry A does with a leased task: report it, or hand it back.
type LeaseReply struct {
	// Report is set when the task ran (or was invalid): send it to the scheduler.
	Report *Report
	// Page and Result are what the task stores, committed with Report as one TaskEnd
	// (nil: none). The runner writes nothing itself.
	Page   *Page
	Result *FetchResult
	// Release is set when the task was handed back unrun, with RetryAfter.
	Release    bool
	RetryAfter time.Duration
}

// End returns the task's end (Report set), to commit as one write.
func (o LeaseReply) End() *TaskEnd {
	return &TaskEnd{Report: o.Report, Page: o.Page, Result: o.Result}
}

// RetryAfterSeconds is RetryAfter rounded up to whole seconds, at least 1.
func (o LeaseReply) RetryAfterSeconds() int64 {
	return max(1, int64(math.Ceil(o.RetryAfter.Seconds())))
}

package downloader

import "time"

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
}

// Report is what entry A tells the scheduler about a finished task: the lean summary plus
// the task's identity and where its page went. Never the page itself.
type Report struct {
	TaskID string `json:"task_id"`
	Summary
	FetchedAt time.Time `json:"fetched_at"`
	PageKey   string    `json:"page_key,omitempty"`
}

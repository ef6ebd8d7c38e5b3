package observe

// QueueCounts are the local queue's task counts (localqueue.Counts), as the console's
// queue panel and the metrics show them. Every count is of tasks ever queued in the data
// dir, resumes included.
type QueueCounts struct {
	PendingCount   int `json:"pending_count"` // waiting, a retry's backoff included
	LeasedCount    int `json:"leased_count"`  // running now
	DoneCount      int `json:"done_count"`    // fetched, successfully or not
	SucceededCount int `json:"succeeded_count"`
	FailedCount    int `json:"failed_count"`
	// SkippedCount counts the tasks not fetched on purpose (robots.txt).
	SkippedCount int `json:"skipped_count"`
	RetryCount   int `json:"retry_count"`
	PageCount    int `json:"page_count"` // tasks whose page was stored
}

// TotalCount is every task queued (discovered): pending, leased, done or skipped.
func (c QueueCounts) TotalCount() int {
	return c.PendingCount + c.LeasedCount + c.DoneCount + c.SkippedCount
}

// RemainingCount is what is left to run: pending or leased.
func (c QueueCounts) RemainingCount() int { return c.PendingCount + c.LeasedCount }

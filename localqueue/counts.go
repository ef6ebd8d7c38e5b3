package localqueue

import "downloader"

// Counts counts the queue's tasks by state, and the finished ones by outcome.
type Counts struct {
	PendingCount   int `json:"pending_count"` // including those waiting out a retry backoff
	LeasedCount    int `json:"leased_count"`
	DoneCount      int `json:"done_count"` // finished by a fetch, successfully or not
	SucceededCount int `json:"succeeded_count"`
	// SkippedCount counts the tasks finished without a fetch, on purpose (robots.txt).
	SkippedCount int `json:"skipped_count"`
	// RetryCount counts the retries the queue scheduled (in place or after a backoff).
	RetryCount int `json:"retry_count"`
	// FailedCount counts the finished tasks by fail_reason.
	FailedCount map[downloader.FailReason]int `json:"failed_count"`
	// PageCount counts the finished tasks whose page was stored (several tasks may share
	// one deduplicated page).
	PageCount int `json:"page_count"`
}

// TotalCount is every task ever queued.
func (c Counts) TotalCount() int {
	return c.PendingCount + c.LeasedCount + c.DoneCount + c.SkippedCount
}

// FinishedCount is every task that will not run again: done or skipped.
func (c Counts) FinishedCount() int { return c.DoneCount + c.SkippedCount }

// OwnFailureCount counts the finished tasks that failed for the downloader's own reasons
// (has_reached_origin=false).
func (c Counts) OwnFailureCount() int {
	n := 0
	for r, k := range c.FailedCount {
		if !r.HasReachedOrigin() {
			n += k
		}
	}
	return n
}

func (c Counts) clone() Counts {
	m := make(map[downloader.FailReason]int, len(c.FailedCount))
	for k, v := range c.FailedCount {
		m[k] = v
	}
	c.FailedCount = m
	return c
}

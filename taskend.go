package downloader

import "context"

// TaskEnd is everything one finished task of entry A leaves behind, as one value: the
// report for its source and what the page store and the result store keep of it. The
// engine returns it (LeaseReply) and the lease loop has it committed at once, by the
// store that owns the writes (TaskCommitter): nothing of it is written before that
// commit, and the task is acknowledged only once the commit is synced (SPEC §1: at least
// once).
type TaskEnd struct {
	// Report is the task's report (SPEC §4).
	Report *Report
	// Page is the page to store, or nil: none (no body, should_store=false, no page
	// store), or a 304 confirmed the stored one (Report.PageKey is set then). When it is
	// set, the commit fills Report.PageKey and Result.PageKey with its key.
	Page *Page
	// Result is the fetch_result record to append, or nil when no result store is kept.
	Result *FetchResult
}

// SetPageKey records key, the stored page's, in the report and the result.
func (e *TaskEnd) SetPageKey(key string) {
	if e.Report != nil {
		e.Report.PageKey = key
	}
	if e.Result != nil {
		e.Result.PageKey = key
	}
}

// TaskCommitter commits a task's end in one write and returns once it is durable.
// Implementations are safe for concurrent use; concurrent commits may share one fsync
// (group commit).
type TaskCommitter interface {
	CommitTask(ctx context.Context, end *TaskEnd) error
}

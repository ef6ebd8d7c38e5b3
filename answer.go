package downloader

import (
	"fmt"
	"math"
	"time"
)

// Answer is a finished B or C request (entry B's answer; entry C answers its Summary): the
// outcome and, when stored, the page's key.
type Answer struct {
	Outcome *Outcome
	Summary Summary
	PageKey string
	// HTML is entry B's html: the rendered document, or for a plain fetch the body as
	// served decoded to UTF-8 (htmltext.AsUTF8, the rule raw_text_length and the page
	// store's reader use too; a body that is not text as it is). Outcome.Body keeps the bytes as served, for the page store.
	HTML string
}

// OverLimitError is entry B's refusal: answer 429 with RetryAfter.
type OverLimitError struct {
	Reason     FailReason // self_rate_limited or local_queue_full
	RetryAfter time.Duration
}

func (e *OverLimitError) Error() string {
	return fmt.Sprintf("over limit (%s): retry after %v", e.Reason, e.RetryAfter)
}

// RetryAfterSeconds is the wait rounded up to whole seconds, at least 1.
func (e *OverLimitError) RetryAfterSeconds() int64 {
	return max(1, int64(math.Ceil(e.RetryAfter.Seconds())))
}

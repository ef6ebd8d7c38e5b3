package localqueue

import (
	"container/heap"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
	"downloader/retryafter"
	"downloader/store/keys"
)

// Retries. The local queue stands in for the scheduler (SPEC §1), so it follows the
// scheduler's table in seed 002 for what comes back:
//
//	has_reached_origin=false (our own problem)   retry in place: no backoff, no attempt
//	reached, transient (5xx, 408, 429, connect   retry after an exponential backoff with
//	  or response timeout, connection reset)     jitter, at least the origin's Retry-After,
//	                                             until MaxAttemptCount attempts
//	success, skip, or anything else              final
//
// "In place" keeps the domain's pacing: the task is first of its domain again and goes out
// at the domain's next slot, as a released task does. invalid_task is final although it is
// our own: the same task is just as invalid the next time. A failure of our own is retried
// at most MaxOwnFailureCount times, then final: without that bound a crawl whose browser
// cannot start would never end. A Retry-After holds the whole domain (the origin asked for
// it), a plain backoff only the task. A Retry-After longer than retryafter.MaxWait (an
// hour, the largest min_interval_ms) counts as that longest wait: the task and its domain
// wait an hour, never less because the number was too large to count (SPEC §2, the
// origin's own wait). A 429 or 503 without Retry-After holds the domain too, by the
// queue's own curve (pushback.go).

// Retry defaults.
const (
	DefaultMaxAttemptCount    = 3
	DefaultRetryBaseDelay     = 2 * time.Second
	DefaultRetryMaxDelay      = 10 * time.Minute
	DefaultMaxOwnFailureCount = 10
)

func (c *Config) retryDefaults() {
	if c.MaxAttemptCount <= 0 {
		c.MaxAttemptCount = DefaultMaxAttemptCount
	}
	if c.RetryBaseDelay <= 0 {
		c.RetryBaseDelay = DefaultRetryBaseDelay
	}
	if c.RetryMaxDelay <= 0 {
		c.RetryMaxDelay = DefaultRetryMaxDelay
	}
	if c.MaxOwnFailureCount <= 0 {
		c.MaxOwnFailureCount = DefaultMaxOwnFailureCount
	}
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
}

type retryAction int

const (
	actionFinish retryAction = iota
	actionRetryInPlace
	actionRetryLater
)

// retryDecision is what Report does with a task.
type retryDecision struct {
	action retryAction
	at     time.Time // actionRetryLater: next_attempt_at
	hold   time.Time // when set, no task of the domain before then (Retry-After)
}

// FailureClass sorts a report by the seeds' table: "final", "own" or "transient".
func FailureClass(r *downloader.Report) string {
	switch {
	case r.SkipReason != "" || r.FailReason == nil || *r.FailReason == "":
		return "final"
	case *r.FailReason == downloader.FailInvalidTask:
		return "final"
	case !r.FailReason.HasReachedOrigin():
		return "own"
	}
	switch *r.FailReason {
	case downloader.FailConnectTimeout, downloader.FailResponseTimeout, downloader.FailConnectionReset:
		return "transient"
	case downloader.FailHTTPStatusError:
		if r.HTTPStatus != nil {
			st := *r.HTTPStatus
			if st >= 500 || st == http.StatusTooManyRequests || st == http.StatusRequestTimeout {
				return "transient"
			}
		}
	}
	return "final"
}

// decide updates rec's attempt counts for the report r and says what to do with it. The
// origin's Retry-After on a transient failure holds the domain whatever becomes of the
// task (its last attempt too: the domain's other tasks must still wait), and the task
// comes back no earlier than it.
func (c *Config) decide(rec *queueRecord, r *downloader.Report, now time.Time) retryDecision {
	rec.NextAttemptAt = time.Time{}
	class := FailureClass(r)
	if class == "own" {
		rec.OwnFailureCount++
		if rec.OwnFailureCount > c.MaxOwnFailureCount {
			return retryDecision{action: actionFinish}
		}
		return retryDecision{action: actionRetryInPlace}
	}
	if r.SkipReason == "" && r.HasReachedOrigin {
		rec.AttemptCount++
	}
	var hold time.Time
	ra := originWait(r)
	if class == "transient" && ra > 0 {
		hold = now.Add(ra)
	}
	if class != "transient" || rec.AttemptCount >= c.MaxAttemptCount {
		return retryDecision{action: actionFinish, hold: hold}
	}
	return retryDecision{action: actionRetryLater, at: now.Add(max(c.backoff(rec.AttemptCount), ra)), hold: hold}
}

// originWait is the origin's Retry-After in r as a wait, 0 when it sent none. However
// large the reported number (a report from an older process may carry any int64), the
// wait is at most retryafter.MaxWait: saturated, never wrapped by the conversion to a
// time.Duration (SPEC §2, the origin's own wait).
func originWait(r *downloader.Report) time.Duration {
	if r.HealthSignal == nil || r.HealthSignal.RetryAfterSeconds == nil {
		return 0
	}
	return retryafter.Duration(*r.HealthSignal.RetryAfterSeconds)
}

// backoff is the wait after the attempt-th attempt: RetryBaseDelay doubled per attempt,
// at most RetryMaxDelay, of which the upper half is jitter ("equal jitter": never less
// than half the nominal wait, so that retries of many tasks spread without any coming
// back early).
func (c *Config) backoff(attempt int) time.Duration {
	d := c.RetryBaseDelay
	for i := 1; i < attempt && d < c.RetryMaxDelay; i++ {
		d *= 2
	}
	d = min(d, c.RetryMaxDelay)
	half := d / 2
	return half + time.Duration(c.Jitter()*float64(d-half))
}

func retryKey(taskID string) []byte { return []byte(queueRetrPrefix + taskID) }

func retryValue(at time.Time, domain string) []byte {
	v := make([]byte, 8, 8+len(domain))
	binary.BigEndian.PutUint64(v, uint64(at.UnixNano()))
	return append(v, domain...)
}

// loadRetries rebuilds the retry heap from the index. Requires q.mu held.
func (q *Queue) loadRetries(ctx context.Context) error {
	iter, err := q.ks.NewIter(ctx, []byte(queueRetrPrefix), keys.PrefixEnd(queueRetrPrefix))
	if err != nil {
		return fmt.Errorf("local queue: scan retries: %w", err)
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		v, err := iter.ValueAndErr()
		if err != nil || len(v) < 8 {
			_ = iter.Close()
			return fmt.Errorf("local queue: retry entry %q: %v", iter.Key(), err)
		}
		q.retries = append(q.retries, retryEntry{
			taskID: string(iter.Key()[len(queueRetrPrefix):]),
			domain: string(v[8:]),
			at:     time.Unix(0, int64(binary.BigEndian.Uint64(v[:8]))),
		})
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("local queue: scan retries: %w", err)
	}
	heap.Init(&q.retries)
	return nil
}

// promoteRetriesLocked moves the tasks whose backoff is over by now into the pending
// index, first of their domains. Requires q.mu held.
func (q *Queue) promoteRetriesLocked(now time.Time) error {
	if q.retries.Len() == 0 || q.retries[0].at.After(now) {
		return nil
	}
	b := q.ks.NewBatch()
	defer b.Close()
	var due []retryEntry
	for q.retries.Len() > 0 && !q.retries[0].at.After(now) {
		e := heap.Pop(&q.retries).(retryEntry)
		due = append(due, e)
	}
	var back []*queueRecord
	for _, e := range due {
		rec, ok, err := q.record(nil, e.taskID)
		if err == nil && ok && (rec.State != TaskPending || rec.NextAttemptAt.IsZero()) {
			ok = false // finished or promoted meanwhile: the entry is stale
		}
		if err == nil {
			err = b.Delete(retryKey(e.taskID), nil)
		}
		if err == nil && ok {
			rec.NextAttemptAt = time.Time{}
			err = q.putRecord(b, rec)
			if err == nil {
				err = b.Set(pendingKey(rec.Domain, rec.Seq), []byte(rec.TaskID), nil)
			}
			back = append(back, rec)
		}
		if err != nil {
			for _, e := range due {
				heap.Push(&q.retries, e)
			}
			return fmt.Errorf("local queue: promote retries: %w", err)
		}
	}
	if err := q.commit(b, q.counts, pebble.NoSync); err != nil {
		for _, e := range due {
			heap.Push(&q.retries, e)
		}
		return err
	}
	for _, rec := range back {
		q.addPendingLocked(rec.Domain, rec.Seq, rec.TaskID, time.Time{})
	}
	return nil
}

// holdLocked keeps domain's tasks back until at. Requires q.mu held.
func (q *Queue) holdLocked(domain string, at time.Time) {
	q.holds[domain] = later(q.holds[domain], at)
	if d := q.domains[domain]; d != nil && at.After(d.nextAt) {
		d.nextAt = at
		if d.index >= 0 {
			heap.Fix(&q.ready, d.index)
		}
	}
}

// SetCrawlDelay makes the queue hand out domain's tasks at least d apart (robots.txt
// Crawl-delay, learned by the crawl's robots gate): the queue plays the sampler here,
// whose interval is max(crawl_delay, the default). The tasks' own min_interval_ms is
// raised to it by the gate when they run; this keeps them from being leased only to wait.
// Kept in memory, one entry per domain; d <= 0 removes it.
func (q *Queue) SetCrawlDelay(domain string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if d <= 0 {
		delete(q.floors, domain)
		return
	}
	q.floors[domain] = min(d, downloader.MaxMinInterval)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

type retryEntry struct {
	taskID string
	domain string
	at     time.Time
}

// retryHeap orders waiting retries by next_attempt_at.
type retryHeap []retryEntry

func (h retryHeap) Len() int           { return len(h) }
func (h retryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h retryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *retryHeap) Push(x any)        { *h = append(*h, x.(retryEntry)) }
func (h *retryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// Package localqueue is the standalone crawl's task queue: entry A's source when no
// scheduler is configured, fed by POST /v1/tasks and `downloader crawl`. It stands in for
// the scheduler, another service, hence its own service name in the keys. It persists in
// the embedded store's Pebble database, in the keyspace the store hands it
// (embedded.LocalQueuePrefix):
//
//	local_queue:meta:seq
//	    The last task sequence number handed out, 8 bytes big-endian.
//	local_queue:meta:counts
//	    The counts no index gives back (Counts without pending_count and leased_count),
//	    JSON, rewritten in the same batch as every report that changes them.
//	local_queue:task:{task_id}
//	    One task record, JSON: the task, its sequence number, its state (pending, leased,
//	    done), its lease and, once done, the report it ended with.
//	local_queue:pending:{domain}:{seq}
//	    Index of the pending tasks by domain, in submission order; the value is the task
//	    id. {domain} is escaped like the fetch_result index, {seq} is 16 hex digits.
//	local_queue:leased:{task_id}
//	    Index of the leased tasks (empty value), so that leases left by a stopped process
//	    are found at once when the queue is opened again.
//	local_queue:url:{sha256}
//	    Deduplication: the hex SHA-256 of a task's canonical URL → its task id.
//	local_queue:retry:{task_id}
//	    Index of the pending tasks waiting out a retry backoff (retry.go); the value
//	    is next_attempt_at in Unix nanoseconds (8 bytes big-endian) then the domain. Such a
//	    task is pending but not in the pending index until its time comes.
//
// Deduplication: a URL is queued once for the life of the data directory. The canonical
// URL is discover.Canonical's form (CanonicalURL): scheme and host in lower case, the
// limiter's host, no default port, dot segments resolved, no fragment (which never reaches
// the origin). Submitting it again, pending, leased or done, returns the
// existing task with is_duplicate=true. That is what makes `downloader crawl FILE` resume:
// running it again on the same file queues nothing new and finishes what is left. To crawl
// a URL again, use a new data directory.
//
// Pacing: the queue hands out a domain's tasks no faster than their min_interval_ms, as
// the scheduler rate-limits its own dequeue path (SPEC §1), and at most Lookahead before
// they are due, so that the lease loop holds only tasks that can start soon while the
// limiter (the insurance) still decides each task's exact slot. Domains are served earliest
// due first.
//
// The in-memory index. Each domain with pending tasks keeps their seqs, 8 B per queued
// task, in a heap (first submitted first); a task's id is its seq's own form
// (defaultTaskID) unless the queue's map of other ids has it (a task submitted with an id
// of its own), and the domains are in a heap by the time their next task is due: a
// lease takes the earliest due domain's first task in O(log n) and reads from Pebble only
// the record it hands out, never an iterator and never a record it does not hand out; the
// first lease of a task submitted by this process reads nothing while the queue keeps
// that record from the submit (Config.FreshRecordCount of them, the first submitted).
// Pebble stays the truth: the index is rebuilt from the pending index keys on open, and
// every change to it follows a committed batch that made the same change in Pebble.
//
// Counts. Pending and leased counts are not stored: they are what the pending, retry and
// leased indexes hold, counted on open (where the leases go back to pending anyway). The
// other counts (done, succeeded, failed by reason, skipped, pages, retries) change only
// when a report is taken, and are written in that report's batch, with the record change
// they count: a crash keeps both or loses both, so the stored counts always match the
// stored records, and nothing else rewrites them.
//
// Durability: Submit commits synchronously (a submitted task is never lost). Leasing,
// releasing and finishing are not synced: if a power loss drops the last of them, the
// tasks concerned are pending or leased again and run again (at least once); the lease
// loop writes every report to the durable outbox before it reports it here, and a report
// whose acknowledgement was lost is still in the outbox and is reported again. After a
// restart every lease of the previous process is returned to pending at once (only one
// process can open the data directory, so those leases are dead).
package localqueue

// Package localqueue is the standalone crawl's task queue: entry A's source when no
// scheduler is configured, fed by POST /v1/tasks and `downloader crawl`. It stands in for
// the scheduler, another service, hence its own service name in the keys. It persists in
// the embedded store's Pebble database (records.go).
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
// Counts. Pending and leased counts are not stored: they are what the pending, retry and
// leased indexes hold, counted on open (where the leases go back to pending anyway). The
// other counts (done, succeeded, failed by reason, skipped, pages, retries) change only
// when a report is taken, and are written in that report's batch, with the record change
// they count: a crash keeps both or loses both, so the stored counts always match the
// stored records, and nothing else rewrites them.
//
// Durability: Submit commits synchronously (a submitted task is never lost). A task's end
// committed by the queue (CommitTask, the lease loop's Committer) is synchronous too, with
// the task's page and fetch_result in the same batch: the task is done once all are
// durable. A lease writes nothing: it lives in memory, and the task's stored record and
// pending index entry stay as they were, so that after a crash (only one process can
// open the data directory, so its leases died with it) the task is simply pending. A
// lease's end is written with its record, counted in lease_count: in the task's end, at
// a release or at its expiry; a lease lost in a crash is not counted. Releasing,
// expiring and a report handed in by Report (from the lease loop's outbox, which keeps it
// until the queue took it) are not synced: if a power loss drops the last of them, the
// tasks concerned are pending again and run again (at least once).
//
// The files, by job, each calling only those below it: queue.go, report.go, list.go and
// check.go are the operations; expiry.go returns expired leases and finished backoffs to
// pending; pushback.go and retry.go decide what a report does; index.go is the in-memory
// index; records.go, counts.go and json.go are the stored records and their encoding.
package localqueue

package localqueue

import (
	"net/url"
	"strings"
	"time"

	"downloader"
	"downloader/discover"
)

// CheckTask validates a task as Submit will (the package's CheckTask with the queue's
// default interval and header policy), then refuses what entries B and C refuse beyond it: a URL that names
// a forbidden address directly (Config.CheckURLHost, the SSRF guard's literal-address
// check). POST /v1/tasks and a crawl's task file call it per task to name the bad one;
// errors are EINVALID naming the field, "url" for the guard's.
func (q *Queue) CheckTask(t downloader.Task) (downloader.Task, error) {
	c, err := CheckTask(t, q.cfg.DefaultMinInterval, q.cfg.HeaderPolicy)
	if err != nil || q.cfg.CheckURLHost == nil {
		return c, err
	}
	u, err := url.Parse(strings.TrimSpace(c.URL))
	if err != nil {
		return c, downloader.Invalidf("url", "url is not a URL: %v", err) // cannot happen: CheckTask parsed it
	}
	if err := q.cfg.CheckURLHost(u.Hostname()); err != nil {
		return c, err
	}
	return c, nil
}

// CanonicalURL returns the form of a task URL the queue stores and deduplicates on:
// discover.Canonical's (scheme and host in lower case, the host normalised as the
// limiter's key, no default port, dot segments resolved, no fragment), so that a URL
// given in a crawl file and the same URL found as a link are queued once. A URL that form
// refuses (ValidateTarget accepted it) keeps the older form: scheme and host in lower
// case, no fragment.
func CanonicalURL(u *url.URL) string {
	if s, _, err := discover.Canonical(u); err == nil {
		return s
	}
	c := *u
	c.Scheme = strings.ToLower(c.Scheme)
	c.Host = strings.ToLower(c.Host)
	c.Fragment, c.RawFragment = "", ""
	return c.String()
}

// CheckTask validates a task submitted to the queue and returns it as the queue would store
// it: canonical URL, normalised domain, min_interval_ms filled in with defaultInterval when
// absent, request_headers under hp with canonical names. Errors are EINVALID naming the
// field. The task id may be given (it must then be unique) or left for the queue to
// assign; lease_expires_at is the queue's to set.
func CheckTask(t downloader.Task, defaultInterval time.Duration, hp downloader.HeaderPolicy) (downloader.Task, error) {
	u, host, err := downloader.ValidateTarget(strings.TrimSpace(t.URL), t.Domain, t.MinIntervalMs)
	if err != nil {
		return t, err
	}
	if t.RequestHeaders, err = hp.Check("request_headers", t.RequestHeaders); err != nil {
		return t, err
	}
	if t.MinIntervalMs == nil {
		ms := defaultInterval.Milliseconds()
		t.MinIntervalMs = &ms
	} else {
		ms := *t.MinIntervalMs
		t.MinIntervalMs = &ms
	}
	if err := downloader.CheckTaskID(t.TaskID); err != nil {
		return t, err
	}
	if !t.LeaseExpiresAt.IsZero() {
		return t, downloader.Invalidf("lease_expires_at", "lease_expires_at is set by the queue when it leases the task")
	}
	t.URL = CanonicalURL(u)
	t.Domain = host
	return t, nil
}

package downloader

import (
	"net/url"
	"time"
)

// MaxTaskIDBytes bounds a task_id given by a caller of the local queue.
const MaxTaskIDBytes = 128

// The validators below are the one place that decides whether a target or a task is
// acceptable, and with which message: entries B and C (a 400), a leased task (reported as
// invalid_task, SPEC §4) and the local queue (a 400 on POST /v1/tasks, a bad line in a
// crawl's task file) all call them, so one input gets one answer wherever it arrives.
// Every error is EINVALID and names the field.

// ValidateTarget checks what every request and task names (SPEC §5): url must be an http
// or https URL with a host; domain, when given, must be that host (the limiter is keyed by
// the URL's host, SPEC §2); min_interval_ms, when given, must be in the accepted range.
// It returns the parsed URL and its normalised host.
func ValidateTarget(rawURL, domain string, minIntervalMs *int64) (*url.URL, string, error) {
	u, host, err := ParseTargetURL("url", rawURL)
	if err != nil {
		return nil, "", err
	}
	if domain != "" {
		d, err := CanonicalHost(domain)
		if err != nil {
			return nil, "", err
		}
		if d != host {
			return nil, "", Invalidf("domain", "domain %q is not the URL's host %q: the limiter is keyed by the URL's host", domain, host)
		}
	}
	if minIntervalMs != nil {
		if err := CheckMinInterval(*minIntervalMs); err != nil {
			return nil, "", err
		}
	}
	return u, host, nil
}

// CheckMinInterval checks a min_interval_ms value against the accepted range,
// 0..MaxMinInterval.
func CheckMinInterval(ms int64) error {
	if ms < 0 || ms > MaxMinInterval.Milliseconds() {
		return Invalidf("min_interval_ms", "min_interval_ms must be between 0 and %d (one hour)", MaxMinInterval.Milliseconds())
	}
	return nil
}

// CheckTaskID checks a task_id chosen by a caller of the local queue: at most
// MaxTaskIDBytes, printable, without spaces (it is part of store keys and URLs).
func CheckTaskID(id string) error {
	if len(id) > MaxTaskIDBytes {
		return Invalidf("task_id", "task_id is longer than %d bytes", MaxTaskIDBytes)
	}
	for _, c := range id {
		if c <= ' ' || c == 0x7f {
			return Invalidf("task_id", "task_id must be printable, without spaces")
		}
	}
	return nil
}

// ValidateLeasedTask checks a task leased from the scheduler (SPEC §4, invalid_task): its
// target, with min_interval_ms required (the scheduler always sends it), and its request
// headers under the service's policy hp. It returns the parsed URL and the request to run
// through entry A.
func ValidateLeasedTask(t *Task, hp HeaderPolicy) (*url.URL, Request, error) {
	u, host, err := ValidateTarget(t.URL, t.Domain, t.MinIntervalMs)
	if err != nil {
		return nil, Request{}, err
	}
	if t.MinIntervalMs == nil {
		return nil, Request{}, Invalidf("min_interval_ms", "min_interval_ms is required on a leased task")
	}
	headers, err := hp.Check("request_headers", t.RequestHeaders)
	if err != nil {
		return nil, Request{}, err
	}
	return u, Request{
		URL: u.String(), Domain: host, MinInterval: time.Duration(*t.MinIntervalMs) * time.Millisecond,
		IntervalSource: IntervalSourceLease, ShouldRender: t.ShouldRender,
		ShouldStore: t.ShouldStore, Headers: headers, Entry: EntryLease,
	}, nil
}

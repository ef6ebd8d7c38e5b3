// Package scheduler is the downloader's client of the scheduler (调度器), another team's
// service: the three calls of docs/scheduler-contract.md (lease, report, release). It is
// entry A's Source when --scheduler-url is set.
//
// The scheduler's address is the operator's choice, so it is called directly, not through
// the SSRF guard (it usually lives on a private network the guard would refuse).
//
// Errors: a 4xx answer other than 408 and 429 is a refusal that retrying cannot cure and is
// returned as a *downloader.Error with code EINVALID (404 and 410: ENOTFOUND); everything
// else (network errors, 408, 429, 5xx) is EUNAVAILABLE and the caller retries.
package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"downloader"
)

// DefaultTimeout bounds one call to the scheduler.
const DefaultTimeout = 10 * time.Second

// maxResponseBytes bounds what is read of an answer.
const maxResponseBytes = 16 << 20

// Config configures a Client.
type Config struct {
	// URL is the scheduler's base URL, e.g. http://scheduler:7000; the calls go to
	// {URL}/v1/lease, {URL}/v1/report and {URL}/v1/release.
	URL        string
	HTTPClient *http.Client // default: a client of its own with Timeout
	Timeout    time.Duration
	Logger     *slog.Logger
}

// Client calls the scheduler. Safe for concurrent use; call Close when done.
type Client struct {
	base string
	http *http.Client
	log  *slog.Logger
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// New returns a client for cfg.URL, which must be an http or https URL.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, downloader.Invalidf("scheduler_url", "scheduler URL %q must be an http or https URL", cfg.URL)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil // the scheduler is reached directly, never through an environment proxy
		hc = &http.Client{Timeout: cfg.Timeout, Transport: tr}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{base: strings.TrimRight(u.String(), "/"), http: hc, log: log.With("component", "scheduler_client")}, nil
}

// leaseRequest is the body of POST /v1/lease.
type leaseRequest struct {
	WorkerID     string `json:"worker_id"`
	MaxTaskCount int    `json:"max_task_count"`
}

// releaseRequest is the body of POST /v1/release.
type releaseRequest struct {
	TaskID            string `json:"task_id"`
	RetryAfterSeconds int64  `json:"retry_after_seconds"`
}

// Lease asks for up to maxTaskCount tasks. Tasks are decoded one field at a time: a field of
// the wrong type is logged and left out, so that the task is reported as invalid_task by
// the engine instead of making the whole answer unreadable. An entry without a task_id
// cannot be reported and is skipped (logged); its lease runs out at the scheduler.
func (c *Client) Lease(ctx context.Context, workerID string, maxTaskCount int) ([]downloader.Task, error) {
	var body struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if err := c.call(ctx, "/v1/lease", leaseRequest{WorkerID: workerID, MaxTaskCount: maxTaskCount}, &body); err != nil {
		return nil, err
	}
	tasks := make([]downloader.Task, 0, len(body.Tasks))
	for i, raw := range body.Tasks {
		t, ok := c.decodeTask(raw)
		if !ok {
			c.log.Error("leased task without a task_id: skipped", "index", i, "task", truncate(string(raw), 512))
			continue
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// decodeTask reads one leased task leniently (see Lease).
func (c *Client) decodeTask(raw json.RawMessage) (downloader.Task, bool) {
	var fields map[string]json.RawMessage
	var t downloader.Task
	if err := json.Unmarshal(raw, &fields); err != nil {
		return t, false
	}
	if err := json.Unmarshal(fields["task_id"], &t.TaskID); err != nil || t.TaskID == "" {
		return t, false
	}
	bad := func(field string, err error) {
		c.log.Warn("leased task has a malformed field: left out", "task_id", t.TaskID, "field", field, "error", err)
	}
	for name, v := range fields {
		var err error
		switch name {
		case "task_id":
		case "url":
			err = json.Unmarshal(v, &t.URL)
		case "domain":
			err = json.Unmarshal(v, &t.Domain)
		case "min_interval_ms":
			var n *int64
			if err = json.Unmarshal(v, &n); err == nil {
				t.MinIntervalMs = n
			}
		case "should_render":
			err = json.Unmarshal(v, &t.ShouldRender)
		case "should_store":
			err = json.Unmarshal(v, &t.ShouldStore)
		case "lease_expires_at":
			err = json.Unmarshal(v, &t.LeaseExpiresAt)
		}
		if err != nil {
			bad(name, err)
			if name == "url" {
				// Leave a URL that fails validation with a clear reason.
				t.URL = ""
			}
		}
	}
	return t, true
}

// Report sends one finished task's report (never the page itself).
func (c *Client) Report(ctx context.Context, r *downloader.Report) error {
	return c.call(ctx, "/v1/report", r, nil)
}

// Release hands a task back; retryAfter is sent in whole seconds, rounded up, at least 1.
func (c *Client) Release(ctx context.Context, taskID string, retryAfter time.Duration) error {
	secs := max(1, int64(math.Ceil(retryAfter.Seconds())))
	return c.call(ctx, "/v1/release", releaseRequest{TaskID: taskID, RetryAfterSeconds: secs}, nil)
}

// call POSTs in as JSON to path and decodes a 2xx answer into out (if not nil).
func (c *Client) call(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("scheduler %s: encode: %w", path, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("scheduler %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("scheduler %s: %w", path, ctx.Err())
		}
		c.log.Debug("scheduler call failed", "path", path, "error", err)
		return &downloader.Error{Code: downloader.EUNAVAILABLE, Message: fmt.Sprintf("scheduler %s: %v", path, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return &downloader.Error{Code: downloader.EUNAVAILABLE, Message: fmt.Sprintf("scheduler %s: read answer: %v", path, err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := fmt.Sprintf("scheduler %s: HTTP %d: %s", path, resp.StatusCode, truncate(strings.TrimSpace(string(data)), 256))
		switch {
		case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
			return &downloader.Error{Code: downloader.ENOTFOUND, Message: msg}
		case resp.StatusCode >= 400 && resp.StatusCode < 500 &&
			resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
			return &downloader.Error{Code: downloader.EINVALID, Message: msg}
		}
		return &downloader.Error{Code: downloader.EUNAVAILABLE, Message: msg}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &downloader.Error{Code: downloader.EUNAVAILABLE, Message: fmt.Sprintf("scheduler %s: answer is not the expected JSON: %v", path, err)}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

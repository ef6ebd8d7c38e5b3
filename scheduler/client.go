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
	"sync"
	"sync/atomic"
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
	// isSingleOnly is set once the scheduler answered a batched call with 404, 405 or 501:
	// it has only the single form, which is used from then on.
	isSingleOnly atomic.Bool
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
	return c.call(ctx, "/v1/release", releaseRequest{TaskID: taskID, RetryAfterSeconds: retryAfterSeconds(retryAfter)}, nil)
}

// retryAfterSeconds is a release's wait in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int64 { return max(1, int64(math.Ceil(d.Seconds()))) }

// MaxBatchCount bounds the reports or releases of one batched call.
const MaxBatchCount = 256

// singleConcurrency is how many single-form calls a batch falls back to at once.
const singleConcurrency = 8

// reportBatch is the body of POST /v1/reports.
type reportBatch struct {
	Reports []downloader.Report `json:"reports"`
}

// releaseBatch is the body of POST /v1/releases.
type releaseBatch struct {
	Releases []releaseRequest `json:"releases"`
}

// itemResult is the scheduler's answer for one report or release of a batch: status is
// what the single form would have answered.
type itemResult struct {
	TaskID     string `json:"task_id"`
	HTTPStatus int    `json:"http_status"`
	Error      string `json:"error,omitempty"`
}

// batchAnswer is the 2xx answer of a batched call.
type batchAnswer struct {
	Results []itemResult `json:"results"`
}

// ReportBatch sends many finished tasks' reports in one call (POST /v1/reports, at most
// MaxBatchCount). errs[i] is rs[i]'s outcome, classified as Report's error is: nil when
// acknowledged. A report the answer does not mention is not acknowledged (EUNAVAILABLE).
// Against a scheduler without the batched form (404, 405 or 501 to the call) it sends
// each report with Report instead, and keeps doing so.
func (c *Client) ReportBatch(ctx context.Context, rs []downloader.Report) []error {
	if len(rs) > MaxBatchCount {
		return fill(len(rs), downloader.Invalidf("reports", "at most %d reports per call", MaxBatchCount))
	}
	ids := make([]string, len(rs))
	for i := range rs {
		ids[i] = rs[i].TaskID
	}
	return c.batch(ctx, "/v1/reports", reportBatch{Reports: rs}, ids, func(i int) error { return c.Report(ctx, &rs[i]) })
}

// ReleaseBatch hands many tasks back in one call (POST /v1/releases, at most
// MaxBatchCount); retryAfter[i] belongs to taskIDs[i] and is sent as Release sends it.
// errs are as ReportBatch's.
func (c *Client) ReleaseBatch(ctx context.Context, taskIDs []string, retryAfter []time.Duration) []error {
	if len(taskIDs) > MaxBatchCount || len(retryAfter) != len(taskIDs) {
		return fill(len(taskIDs), downloader.Invalidf("releases", "at most %d releases per call, one retry_after each", MaxBatchCount))
	}
	body := releaseBatch{Releases: make([]releaseRequest, len(taskIDs))}
	for i, id := range taskIDs {
		body.Releases[i] = releaseRequest{TaskID: id, RetryAfterSeconds: retryAfterSeconds(retryAfter[i])}
	}
	return c.batch(ctx, "/v1/releases", body, taskIDs, func(i int) error { return c.Release(ctx, taskIDs[i], retryAfter[i]) })
}

// batch makes one batched call and matches its per-task results to ids, or falls back to
// single calls (one at a time per item, singleConcurrency at once).
func (c *Client) batch(ctx context.Context, path string, body any, ids []string, single func(i int) error) []error {
	if len(ids) == 0 {
		return nil
	}
	if !c.isSingleOnly.Load() {
		var ans batchAnswer
		status, err := c.callStatus(ctx, path, body, &ans)
		switch status {
		case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
			if !c.isSingleOnly.Swap(true) {
				c.log.Info("the scheduler has no batched form: sending one report or release per call", "path", path, "http_status", status)
			}
		default:
			if err != nil {
				return fill(len(ids), err)
			}
			byID := make(map[string]itemResult, len(ans.Results))
			for _, r := range ans.Results {
				byID[r.TaskID] = r
			}
			errs := make([]error, len(ids))
			for i, id := range ids {
				r, ok := byID[id]
				switch {
				case !ok:
					errs[i] = &downloader.Error{Code: downloader.EUNAVAILABLE, Message: fmt.Sprintf("scheduler %s: no result for task %q", path, id)}
				case r.HTTPStatus < 200 || r.HTTPStatus > 299:
					errs[i] = statusError(fmt.Sprintf("scheduler %s: task %q: %d: %s", path, id, r.HTTPStatus, truncate(r.Error, 256)), r.HTTPStatus)
				}
			}
			return errs
		}
	}
	errs := make([]error, len(ids))
	sem := make(chan struct{}, singleConcurrency)
	var wg sync.WaitGroup
	for i := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = single(i)
		}()
	}
	wg.Wait()
	return errs
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// call POSTs in as JSON to path and decodes a 2xx answer into out (if not nil).
func (c *Client) call(ctx context.Context, path string, in, out any) error {
	_, err := c.callStatus(ctx, path, in, out)
	return err
}

// statusError classifies a non-2xx answer (the table in the package comment).
func statusError(msg string, status int) error {
	switch {
	case status == http.StatusNotFound || status == http.StatusGone:
		return &downloader.Error{Code: downloader.ENOTFOUND, Message: msg}
	case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
		return &downloader.Error{Code: downloader.EINVALID, Message: msg}
	}
	return &downloader.Error{Code: downloader.EUNAVAILABLE, Message: msg}
}

// callStatus is call that also returns the answer's status (0 when there was none).
func (c *Client) callStatus(ctx context.Context, path string, in, out any) (int, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return 0, fmt.Errorf("scheduler %s: encode: %w", path, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("scheduler %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("scheduler %s: %w", path, ctx.Err())
		}
		c.log.Debug("scheduler call failed", "path", path, "error", err)
		return 0, &downloader.Error{Code: downloader.EUNAVAILABLE, Message: fmt.Sprintf("scheduler %s: %v", path, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return resp.StatusCode, &downloader.Error{Code: downloader.EUNAVAILABLE, Message: fmt.Sprintf("scheduler %s: read answer: %v", path, err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := fmt.Sprintf("scheduler %s: HTTP %d: %s", path, resp.StatusCode, truncate(strings.TrimSpace(string(data)), 256))
		return resp.StatusCode, statusError(msg, resp.StatusCode)
	}
	if out == nil {
		return resp.StatusCode, nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp.StatusCode, &downloader.Error{Code: downloader.EUNAVAILABLE, Message: fmt.Sprintf("scheduler %s: answer is not the expected JSON: %v", path, err)}
	}
	return resp.StatusCode, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

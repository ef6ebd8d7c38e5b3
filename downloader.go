// Package downloader holds the domain types of the crawler's downloader (下载器): the
// entries a request can come through, the closed set of fail reasons, the lean summary
// every entry returns, and the health signal the scheduler judges a domain by.
//
// Adapters live in sub-packages (fetch, render, store/..., server, lease); only
// cmd/downloader wires them together. See docs/decisions.md for the layout.
package downloader

import (
	"time"
)

// MaxMinInterval is the largest min_interval_ms the service accepts. A request above it is
// refused with 400. It also bounds how long a limiter entry must be remembered: an entry
// older than this can no longer refuse any request (SPEC §2).
const MaxMinInterval = time.Hour

// Entry names the way a request reached the downloader (SPEC §1).
type Entry string

const (
	EntryLease  Entry = "a" // A: the lease loop, tasks from the scheduler or the local queue.
	EntryRender Entry = "b" // B: POST /v1/render.
	EntryProbe  Entry = "c" // C: POST /v1/probe.
)

// Entries lists every entry in display order.
var Entries = [...]Entry{EntryLease, EntryRender, EntryProbe}

// IntervalSource says where a request's min_interval_ms came from.
type IntervalSource string

const (
	IntervalSourceLease   IntervalSource = "lease"   // lease 消息: set by the sampler, carried by a task.
	IntervalSourceRequest IntervalSource = "request" // the caller of B or C gave it.
	IntervalSourceDefault IntervalSource = "default" // 全局默认: the caller gave none.
)

// FailReason is the closed set of failure causes (SPEC §4). The empty value means success.
type FailReason string

const (
	FailSelfRateLimited     FailReason = "self_rate_limited"
	FailLocalQueueFull      FailReason = "local_queue_full"
	FailRendererUnavailable FailReason = "renderer_unavailable"
	FailRendererCrashed     FailReason = "renderer_crashed"
	FailRenderTimeout       FailReason = "render_timeout"
	FailResolverUnavailable FailReason = "resolver_unavailable"
	FailShuttingDown        FailReason = "shutting_down"
	FailInvalidTask         FailReason = "invalid_task"
	// FailRuntimeStoreUnavailable: the shared limiter state (TiKV in cluster mode) cannot
	// be reached, so no admission can be given: we fail closed, and it is our problem.
	FailRuntimeStoreUnavailable FailReason = "runtime_store_unavailable"
	// FailEgressUnavailable: network failures hit many distinct domains at once: our own
	// egress is failing, not every site at the same moment; or the operator's egress proxy
	// is down or refused us (CauseEgressProxyFailed).
	FailEgressUnavailable FailReason = "egress_unavailable"

	FailDomainNotFound       FailReason = "domain_not_found"
	FailConnectRefused       FailReason = "connect_refused"
	FailConnectTimeout       FailReason = "connect_timeout"
	FailTLSFailed            FailReason = "tls_failed"
	FailResponseTimeout      FailReason = "response_timeout"
	FailConnectionReset      FailReason = "connection_reset"
	FailHTTPStatusError      FailReason = "http_status_error"
	FailDestinationForbidden FailReason = "destination_forbidden"
)

// failReasonInfo is the fixed table behind FailReason's methods.
var failReasonInfo = map[FailReason]struct {
	hasReachedOrigin bool
	label            string // Chinese, as the seeds name it
	englishLabel     string
}{
	FailSelfRateLimited:         {false, "自身限速拒绝", "our own limiter refused"},
	FailLocalQueueFull:          {false, "本地队列满", "local queue full"},
	FailRendererUnavailable:     {false, "渲染器起不来", "renderer unavailable"},
	FailRendererCrashed:         {false, "渲染器中途崩溃", "renderer crashed mid-render"},
	FailRenderTimeout:           {false, "渲染超时", "render timed out"},
	FailResolverUnavailable:     {false, "我方 DNS 解析失败", "our DNS resolver failed"},
	FailShuttingDown:            {false, "服务正在停止", "service stopping"},
	FailInvalidTask:             {false, "任务格式错误", "malformed task"},
	FailRuntimeStoreUnavailable: {false, "限速状态库不可用", "limiter state store unavailable"},
	FailEgressUnavailable:       {false, "我方出口网络故障", "our egress network down"},
	FailDomainNotFound:          {true, "域名不存在", "domain does not exist"},
	FailConnectRefused:          {true, "连接被拒绝", "connection refused"},
	FailConnectTimeout:          {true, "连接超时", "connect timed out"},
	FailTLSFailed:               {true, "TLS 握手失败", "TLS handshake failed"},
	FailResponseTimeout:         {true, "响应超时", "response timed out"},
	FailConnectionReset:         {true, "连接被重置", "connection reset"},
	FailHTTPStatusError:         {true, "对方返回非 2xx", "origin answered non-2xx"},
	FailDestinationForbidden:    {true, "目标地址禁止访问", "destination address forbidden"},
}

// FailReasons lists the closed set in a stable order.
func FailReasons() []FailReason {
	return []FailReason{
		FailSelfRateLimited, FailLocalQueueFull, FailRendererUnavailable, FailRendererCrashed,
		FailRenderTimeout, FailResolverUnavailable, FailShuttingDown, FailInvalidTask,
		FailRuntimeStoreUnavailable, FailEgressUnavailable, FailDomainNotFound, FailConnectRefused, FailConnectTimeout, FailTLSFailed,
		FailResponseTimeout, FailConnectionReset, FailHTTPStatusError, FailDestinationForbidden,
	}
}

// HasReachedOrigin reports whether a failure with this reason means the request really
// reached the other side's server. The empty reason (success) has reached it.
func (r FailReason) HasReachedOrigin() bool {
	if r == "" {
		return true
	}
	return failReasonInfo[r].hasReachedOrigin
}

// Label is the readable (Chinese) label the console shows.
func (r FailReason) Label() string {
	if r == "" {
		return "—"
	}
	if info, ok := failReasonInfo[r]; ok {
		return info.label
	}
	return string(r)
}

// EnglishLabel is the readable English label the console shows beside Label.
func (r FailReason) EnglishLabel() string {
	if r == "" {
		return "—"
	}
	if info, ok := failReasonInfo[r]; ok {
		return info.englishLabel
	}
	return string(r)
}

// IsValid reports whether r is in the closed set (or empty).
func (r FailReason) IsValid() bool {
	_, ok := failReasonInfo[r]
	return ok || r == ""
}

// HealthSignal is the one object shape the scheduler judges a fetch by, in probe
// responses, render responses and reports alike (SPEC §3). XHR fields are nil when the
// request was not rendered.
type HealthSignal struct {
	ElapsedMs     int64  `json:"elapsed_ms"`
	BodyBytes     int64  `json:"body_bytes"`
	ContentType   string `json:"content_type"`
	RedirectCount int    `json:"redirect_count"`
	// IsBodyTruncated: the body (fetch) or the rendered HTML (render) was over the size cap
	// and what is measured and stored is its first part.
	IsBodyTruncated bool `json:"is_body_truncated"`
	// RetryAfterSeconds is the origin's own Retry-After on a 429 or 503, when it sent one.
	RetryAfterSeconds *int64 `json:"retry_after_seconds"`
	// HTTPVersion is the protocol the final answer came in ("1.1", "2"; "1.0" from an old
	// server); null when no answer came, and for renders.
	HTTPVersion *string `json:"http_version"`
	// IsNotModified: the origin answered 304 to our conditional request (the page store's
	// validators for the URL): the stored page is the page, and nothing was downloaded.
	IsNotModified bool `json:"is_not_modified"`

	XHRCount              *int `json:"xhr_count"`
	XHRFailedCount        *int `json:"xhr_failed_count"`
	SubrequestCount       *int `json:"subrequest_count"`
	SubrequestFailedCount *int `json:"subrequest_failed_count"`
	BlockedRequestCount   *int `json:"blocked_request_count"`
	// SkippedRequestCount is the sub-requests the render did not make because their
	// resource type is skipped (skip_resource_types): they never reached anyone, and are
	// not in subrequest_count.
	SkippedRequestCount *int `json:"skipped_request_count"`
	// The render's guards against loading other sites behind their limiter (SPEC §3),
	// null when should_render=false. PopupCount: windows the page tried to open (none is
	// loaded). SkippedFrameCount: iframe documents on another host not loaded because that
	// host's turn was not now. CappedSubrequestCount: sub-requests refused because the
	// render's caps (in total, per other host) were reached.
	PopupCount            *int `json:"popup_count"`
	SkippedFrameCount     *int `json:"skipped_frame_count"`
	CappedSubrequestCount *int `json:"capped_subrequest_count"`
}

// Summary is the lean result every entry returns (CONTRACT §二): never the page itself.
type Summary struct {
	Domain           string        `json:"domain"`
	HTTPStatus       *int          `json:"http_status"`
	RawTextLength    *int          `json:"raw_text_length"`
	TextLength       *int          `json:"text_length"`
	HealthSignal     *HealthSignal `json:"health_signal"`
	FailReason       *FailReason   `json:"fail_reason"`
	HasReachedOrigin bool          `json:"has_reached_origin"`
}

// Request is one fetch or render asked of the downloader, through any entry.
type Request struct {
	URL            string
	Domain         string // normalised host of URL
	MinInterval    time.Duration
	IntervalSource IntervalSource
	ShouldRender   bool
	ShouldStore    bool
	Timeout        time.Duration // zero: the service default
	// SkipResourceTypes (renders): nil is the renderer's default, an empty non-nil list
	// loads everything (RenderOptions).
	SkipResourceTypes []ResourceType
	// Headers are the caller's allow-listed request headers (HeaderPolicy.Check); the
	// service's defaults are added by the engine.
	Headers RequestHeaders
	Entry   Entry
}

// Outcome is what a fetch or render produced. Body and Text are the page content; they are
// never part of a probe answer.
type Outcome struct {
	HTTPStatus    int // 0: no response
	FinalURL      string
	RawTextLength *int
	TextLength    *int
	HealthSignal  HealthSignal
	FailReason    FailReason
	Body          []byte // HTML as served (plain) or as rendered
	Text          string // visible text, rendered when should_render
	// Validators are the answer's own (ETag, Last-Modified) on a 2xx plain fetch: stored
	// with the page for the URL's next conditional request.
	Validators Validators
	// NotModifiedPageKey is the stored page a 304 to our conditional request confirmed
	// (health_signal.is_not_modified): the page the request answers with.
	NotModifiedPageKey string
	// ResponseHeaders are the final response's header fields as served (a plain fetch).
	ResponseHeaders map[string][]string

	// Cause is what ended the fetch or render as its producer saw it (cause.go); the
	// engine decides FailReason from it once (DecideFailReason).
	Cause Cause
}

// Summary turns an outcome into the lean summary for domain.
func (o *Outcome) Summary(domain string) Summary {
	s := Summary{
		Domain:           domain,
		RawTextLength:    o.RawTextLength,
		TextLength:       o.TextLength,
		HasReachedOrigin: o.FailReason.HasReachedOrigin(),
	}
	hs := o.HealthSignal
	s.HealthSignal = &hs
	if o.HTTPStatus != 0 {
		st := o.HTTPStatus
		s.HTTPStatus = &st
	}
	if o.FailReason != "" {
		fr := o.FailReason
		s.FailReason = &fr
	}
	return s
}

// Failed returns an outcome that carries only a fail reason.
func Failed(reason FailReason) *Outcome {
	return &Outcome{FailReason: reason}
}

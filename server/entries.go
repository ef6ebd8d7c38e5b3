package server

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"downloader"
)

// maxTimeout bounds timeout_ms on entry B.
const maxTimeout = 5 * time.Minute

// probeRequest is entry C's body (SPEC §5).
type probeRequest struct {
	URL           string `json:"url"`
	Domain        string `json:"domain"`
	ShouldRender  *bool  `json:"should_render"`
	MinIntervalMs *int64 `json:"min_interval_ms"`
	// RequestHeaders are allow-listed headers to send (downloader.HeaderPolicy).
	RequestHeaders map[string]string `json:"request_headers"`
}

// renderRequest is entry B's body (SPEC §5).
type renderRequest struct {
	URL           string `json:"url"`
	Domain        string `json:"domain"`
	ShouldRender  *bool  `json:"should_render"`
	ShouldStore   *bool  `json:"should_store"`
	MinIntervalMs *int64 `json:"min_interval_ms"`
	TimeoutMs     *int64 `json:"timeout_ms"`
	// SkipResourceTypes: absent is the renderer's default (image, media, font), [] loads
	// everything.
	SkipResourceTypes []string `json:"skip_resource_types"`
	// RequestHeaders are allow-listed headers to send (downloader.HeaderPolicy); a render
	// sends them with its main document.
	RequestHeaders map[string]string `json:"request_headers"`
}

// renderResponse is entry B's answer: the lean summary plus the content.
type renderResponse struct {
	downloader.Summary
	FinalURL string `json:"final_url"`
	HTML     string `json:"html"`
	Text     string `json:"text"`
	PageKey  string `json:"page_key,omitempty"`
}

type overLimitBody struct {
	RetryAfterSeconds int64                 `json:"retry_after_seconds"`
	FailReason        downloader.FailReason `json:"fail_reason"`
}

// target validates url, domain and min_interval_ms (downloader.ValidateTarget, shared by
// B, C and the tasks), then the literal-address guard; a missing min_interval_ms takes
// the default.
func (s *Server) target(rawURL, domain string, minIntervalMs *int64) (*url.URL, downloader.Request, error) {
	u, host, err := downloader.ValidateTarget(rawURL, domain, minIntervalMs)
	if err != nil {
		return nil, downloader.Request{}, err
	}
	if s.cfg.Guard != nil {
		if err := s.cfg.Guard.CheckURLHost(u.Hostname()); err != nil {
			return nil, downloader.Request{}, err
		}
	}
	req := downloader.Request{URL: u.String(), Domain: host}
	if minIntervalMs == nil {
		req.MinInterval = s.cfg.Settings.DefaultMinInterval()
		req.IntervalSource = downloader.IntervalSourceDefault
	} else {
		req.MinInterval = time.Duration(*minIntervalMs) * time.Millisecond
		req.IntervalSource = downloader.IntervalSourceRequest
	}
	return u, req, nil
}

// entryBody is what B and C share: the target of the request and its headers.
type entryBody interface {
	targetFields() (rawURL, domain string, minIntervalMs *int64)
	requestHeaders() map[string]string
}

func (b *probeRequest) targetFields() (string, string, *int64) {
	return b.URL, b.Domain, b.MinIntervalMs
}
func (b *probeRequest) requestHeaders() map[string]string { return b.RequestHeaders }
func (b *renderRequest) targetFields() (string, string, *int64) {
	return b.URL, b.Domain, b.MinIntervalMs
}
func (b *renderRequest) requestHeaders() map[string]string { return b.RequestHeaders }

// decodeEntry decodes an entry's body and validates its target; on failure it has
// answered the error and ok is false.
func (s *Server) decodeEntry(w http.ResponseWriter, r *http.Request, body entryBody) (u *url.URL, req downloader.Request, ok bool) {
	if err := decode(w, r, body); err != nil {
		s.writeError(w, r, err)
		return nil, req, false
	}
	u, req, err := s.target(body.targetFields())
	if err == nil {
		req.Headers, err = s.cfg.HeaderPolicy.Check("request_headers", body.requestHeaders())
	}
	if err != nil {
		s.writeError(w, r, err)
		return nil, req, false
	}
	return u, req, true
}

// handleProbe is entry C: always 200 with the lean summary, never stored (SPEC §5). While
// the service drains (drain.go) it answers shutting_down without running the probe.
func (s *Server) handleProbe() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leave, draining := s.enter()
		defer leave()
		var body probeRequest
		u, req, ok := s.decodeEntry(w, r, &body)
		if !ok {
			return
		}
		if draining {
			refuseProbe(w, req.Domain)
			return
		}
		req.ShouldRender = body.ShouldRender != nil && *body.ShouldRender
		writeJSON(w, http.StatusOK, s.cfg.Probe.Probe(r.Context(), req, u))
	})
}

// handleRender is entry B: 200 with the summary and content, or 429 over the limit; 503
// shutting_down while the service drains (drain.go).
func (s *Server) handleRender() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leave, draining := s.enter()
		defer leave()
		var body renderRequest
		u, req, ok := s.decodeEntry(w, r, &body)
		if !ok {
			return
		}
		if draining {
			s.refuseRender(w)
			return
		}
		req.ShouldRender = body.ShouldRender == nil || *body.ShouldRender
		req.ShouldStore = body.ShouldStore != nil && *body.ShouldStore
		if body.TimeoutMs != nil {
			ms := *body.TimeoutMs
			if ms < 1 || ms > maxTimeout.Milliseconds() {
				s.writeError(w, r, downloader.Invalidf("timeout_ms", "timeout_ms must be between 1 and %d", maxTimeout.Milliseconds()))
				return
			}
			req.Timeout = time.Duration(ms) * time.Millisecond
		}
		if body.SkipResourceTypes != nil {
			types, err := downloader.ParseResourceTypes("skip_resource_types", body.SkipResourceTypes)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			req.SkipResourceTypes = types
		}
		res, err := s.cfg.Render.Render(r.Context(), req, u)
		var ol *downloader.OverLimitError
		if errors.As(err, &ol) {
			n := ol.RetryAfterSeconds()
			w.Header().Set("Retry-After", strconv.FormatInt(n, 10))
			writeJSON(w, http.StatusTooManyRequests, overLimitBody{RetryAfterSeconds: n, FailReason: ol.Reason})
			return
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeRenderAnswer(w, renderResponse{Summary: res.Summary, FinalURL: res.Outcome.FinalURL,
			HTML: res.HTML, Text: res.Outcome.Text, PageKey: res.PageKey})
	})
}

package server

import (
	"net/http"
	"strconv"

	"downloader"
	"downloader/htmltext"
)

type fetchResultsResponse struct {
	FetchResults []downloader.FetchResult `json:"fetch_results"`
	NextCursor   *string                  `json:"next_cursor"` // null after the last page (cursorOf)
}

// handleFetchResults is GET /v1/fetch_results?domain=&limit=&cursor=: downloader:fetch_result,
// newest first, optionally of one domain, a page at a time.
func (s *Server) handleFetchResults() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Results == nil {
			s.writeError(w, r, downloader.Errorf(downloader.ENOTFOUND, "this downloader keeps no fetch results"))
			return
		}
		q := r.URL.Query()
		domain := q.Get("domain")
		if domain != "" {
			d, err := downloader.CanonicalHost(domain)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			domain = d
		}
		limit := 0
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				s.writeError(w, r, downloader.Invalidf("limit", "limit must be a whole number"))
				return
			}
			if n < 1 {
				s.writeError(w, r, downloader.Invalidf("limit", "limit must be at least 1"))
				return
			}
			limit = n
		}
		res, next, err := s.cfg.Results.FetchResults(r.Context(), domain, limit, q.Get("cursor"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if res == nil {
			res = []downloader.FetchResult{}
		}
		writeJSON(w, http.StatusOK, fetchResultsResponse{FetchResults: res, NextCursor: cursorOf(next)})
	})
}

// handlePage is GET /v1/pages/{key}: one page of the page store (网页库). The store keeps
// the bytes as served with their Content-Type (a render's DOM as UTF-8); a text body is
// answered in UTF-8, decoded by the rule every output shares (htmltext.AsUTF8), and the
// Content-Type as served is in Page-Content-Type. The page is someone else's content served from our
// origin, so it is sandboxed: no script of it runs with the console's rights.
func (s *Server) handlePage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Pages == nil {
			s.writeError(w, r, downloader.Errorf(downloader.ENOTFOUND, "this downloader keeps no pages"))
			return
		}
		p, err := s.cfg.Pages.Page(r.Context(), r.PathValue("key"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		body, ct := htmltext.AsUTF8(p.Body, p.ContentType)
		if ct == "" {
			ct = "application/octet-stream"
		}
		h := w.Header()
		h.Set("Content-Type", ct)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		if p.ContentType != "" {
			h.Set("Page-Content-Type", p.ContentType)
		}
		h.Set("Content-Security-Policy", "sandbox")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "public, max-age=31536000, immutable") // keyed by content hash
		h.Set("ETag", `"`+p.PageKey+`"`)
		h.Set("Page-Url", p.URL)
		if p.FinalURL != "" {
			h.Set("Page-Final-Url", p.FinalURL)
		}
		if !p.FetchedAt.IsZero() {
			h.Set("Last-Modified", p.FetchedAt.UTC().Format(http.TimeFormat))
		}
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	})
}

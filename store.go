package downloader

import (
	"context"
	"time"
)

// Settings are the service-wide settings changed while running. They survive a restart.
type Settings struct {
	MaxConcurrentCount int `json:"max_concurrent_count"`
}

// SettingsStore keeps Settings. Implementations are safe for concurrent use.
type SettingsStore interface {
	// Settings returns the stored settings; ok is false when none were ever saved.
	Settings(ctx context.Context) (s Settings, ok bool, err error)
	// SaveSettings replaces the stored settings.
	SaveSettings(ctx context.Context, s Settings) error
}

// FetchResult is one record of downloader:fetch_result: the summary of a fetch made by
// entry A (one per task) or by entry B with should_store. Probes never write one.
type FetchResult struct {
	Summary
	TaskID    string    `json:"task_id,omitempty"`
	URL       string    `json:"url"`
	FinalURL  string    `json:"final_url,omitempty"`
	Entry     Entry     `json:"entry"`
	FetchedAt time.Time `json:"fetched_at"`
	PageKey   string    `json:"page_key,omitempty"`
}

// ResultStore keeps downloader:fetch_result. Implementations are safe for concurrent use.
type ResultStore interface {
	// PutFetchResult appends r.
	PutFetchResult(ctx context.Context, r *FetchResult) error
	// FetchResults lists results, newest first, optionally of one domain, from an opaque
	// cursor returned by a previous call ("" for the first page). The returned cursor is ""
	// after the last page.
	FetchResults(ctx context.Context, domain string, limit int, cursor string) ([]FetchResult, string, error)
}

// Page is one stored page of the page store (网页库).
type Page struct {
	PageKey     string    `json:"page_key"`
	URL         string    `json:"url"`
	FinalURL    string    `json:"final_url"`
	ContentType string    `json:"content_type"`
	FetchedAt   time.Time `json:"fetched_at"`
	// ResponseHeaders are the final response's header fields as served (canonical names;
	// a plain fetch only), for the WARC response record; nil for a render or a page
	// stored before they were kept.
	ResponseHeaders map[string][]string `json:"response_headers,omitempty"`
	Body            []byte              `json:"-"`
	// Validators are the origin's validators of this answer, kept for the URL's next
	// conditional request (LatestPage); not part of the stored page itself.
	Validators Validators `json:"-"`
}

// Validators are an answer's HTTP validators (RFC 9110 §8.8): a later request for the same
// URL sends them back (If-None-Match, If-Modified-Since), and a 304 says the stored page
// is still the page (SPEC §4, is_not_modified).
type Validators struct {
	Etag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
}

// IsZero reports whether there is no validator to send.
func (v Validators) IsZero() bool { return v.Etag == "" && v.LastModified == "" }

// PageRef is the page last stored for a URL, with the validators it was served with.
type PageRef struct {
	PageKey string `json:"page_key"`
	Validators
}

// PageStore keeps page content, keyed by content hash and deduplicated. Implementations
// are safe for concurrent use. Page returns an ENOTFOUND *Error for an unknown key.
type PageStore interface {
	// PutPage stores p and returns its key; when p has validators it also becomes its
	// URL's latest page (LatestPage), and a page without them removes the URL's entry.
	PutPage(ctx context.Context, p *Page) (key string, err error)
	Page(ctx context.Context, key string) (*Page, error)
	// LatestPage returns the page last stored for url with validators (ok false when there
	// is none, or its page is not stored). The entry is kept with no durability promise:
	// losing it costs one unconditional fetch.
	LatestPage(ctx context.Context, url string) (ref PageRef, ok bool, err error)
}

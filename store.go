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
	// a plain fetch only), for the WARC response record and, later, validators for
	// conditional requests; nil for a render or a page stored before they were kept.
	ResponseHeaders map[string][]string `json:"response_headers,omitempty"`
	Body            []byte              `json:"-"`
}

// PageStore keeps page content, keyed by content hash and deduplicated. Implementations
// are safe for concurrent use. Page returns an ENOTFOUND *Error for an unknown key.
type PageStore interface {
	PutPage(ctx context.Context, p *Page) (key string, err error)
	Page(ctx context.Context, key string) (*Page, error)
}

package discover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"

	"downloader"
)

// Queue is what the crawler needs of the local queue (cmd/downloader adapts
// localqueue.Queue to it).
type Queue interface {
	// SubmitAtDepth queues tasks found depth links from a seed and returns how many were
	// new (a URL queued before is not queued again).
	SubmitAtDepth(ctx context.Context, tasks []downloader.Task, depth int) (newCount int, err error)
	// TaskAtDepth returns a queued task and its depth.
	TaskAtDepth(ctx context.Context, taskID string) (downloader.Task, int, error)
	// TotalCount counts every task ever queued.
	TotalCount() int
}

// Config configures a Crawler. Queue, Pages and Scope are required; MaxDepth > 0.
type Config struct {
	Queue Queue
	Pages downloader.PageStore
	Scope *Scope
	// MaxDepth: links are followed up to MaxDepth links from a seed.
	MaxDepth int
	// MaxPageCount bounds the tasks of the crawl (seeds, pages found, sitemaps); 0: no
	// bound but the depth.
	MaxPageCount int
	// ShouldReadSitemaps: each site in scope gets its /sitemap.xml queued, and the
	// Sitemap: lines of its robots.txt (RobotsSitemaps).
	ShouldReadSitemaps bool
	Logger             *slog.Logger
}

// Stats counts what the crawler found. The JSON names are SPEC §7's.
type Stats struct {
	// DiscoveredCount counts the URLs queued anew from links and sitemaps.
	DiscoveredCount int `json:"discovered_count"`
	// OutOfScopeCount counts links and sitemap URLs left out of scope (each time seen).
	OutOfScopeCount int `json:"out_of_scope_count"`
	// NofollowLinkCount counts links left for their rel=nofollow; NofollowPageCount the
	// pages whose <meta name=robots> said nofollow; NoindexPageCount noindex.
	NofollowLinkCount int `json:"nofollow_link_count"`
	NofollowPageCount int `json:"nofollow_page_count"`
	NoindexPageCount  int `json:"noindex_page_count"`
	// SitemapCount counts the sitemaps and indexes read; SitemapURLCount their URLs.
	SitemapCount    int `json:"sitemap_count"`
	SitemapURLCount int `json:"sitemap_url_count"`
	// OverMaxPageCount counts the URLs not queued because --max-page-count was reached.
	OverMaxPageCount int `json:"over_max_page_count"`
}

// Crawler follows a crawl's links: after each task's report (AfterReport) it reads the
// task's stored page and queues what it links to. Safe for concurrent use.
//
// It runs before the queue takes the report (cmd/downloader wraps the queue's Report),
// so a task is finished only once its links are queued: the crawl cannot end while links
// wait, and a stop between the two runs the task again, which queues nothing twice.
type Crawler struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex // orders the bound's check and the submits; guards below
	stats Stats
	sites map[string]bool // scheme://host:port whose sitemaps were queued by this process
	// seeded is closed by the first Seeds: until then a report waits, so that no link is
	// judged against a scope without its seeds.
	seeded   chan struct{}
	seedOnce sync.Once
	// robotsMaps: sitemap URLs robots.txt named, waiting for the next AfterReport (the
	// robots runner calls with its lock held, so it must not wait on the queue there).
	robotsMaps []string
}

// New returns a crawler; cfg is checked.
func New(cfg Config) (*Crawler, error) {
	if cfg.Queue == nil || cfg.Pages == nil || cfg.Scope == nil {
		return nil, errors.New("discover: Queue, Pages and Scope are required")
	}
	if cfg.MaxDepth <= 0 {
		return nil, downloader.Invalidf("max_depth", "--max-depth must be above 0 to discover links")
	}
	if cfg.MaxPageCount < 0 {
		return nil, downloader.Invalidf("max_page_count", "--max-page-count must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Crawler{cfg: cfg, log: cfg.Logger.With("component", "discover"), sites: map[string]bool{}, seeded: make(chan struct{})}, nil
}

// Stats returns what was found so far.
func (c *Crawler) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Seeds widens the scope to the seeds (Scope.AddSeed) and queues the sitemaps of their
// sites. Call it with every seed before the crawl starts, also on a resume.
func (c *Crawler) Seeds(ctx context.Context, seeds []downloader.Task) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range seeds {
		c.cfg.Scope.AddSeed(t.Domain)
	}
	c.seedOnce.Do(func() { close(c.seeded) })
	for _, t := range seeds {
		u, err := url.Parse(t.URL)
		if err != nil {
			continue
		}
		if err := c.siteLocked(ctx, u); err != nil {
			return err
		}
	}
	return nil
}

// RobotsSitemaps takes the Sitemap: lines of a site's robots.txt (robots.Config.Sitemaps).
// They are queued at the next report: the robots.txt request was made for a task whose
// report is still to come.
func (c *Crawler) RobotsSitemaps(site string, urls []string) {
	if !c.cfg.ShouldReadSitemaps || len(urls) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.robotsMaps = append(c.robotsMaps, urls...)
}

// AfterReport follows the links of the page r stored, if the task succeeded with a 2xx
// and is less than MaxDepth links from a seed: a sitemap's URLs, or an HTML page's links,
// in scope and under the page bound, queued one link deeper. An error leaves the report
// to be delivered again.
func (c *Crawler) AfterReport(ctx context.Context, r *downloader.Report) error {
	select {
	case <-c.seeded:
	case <-ctx.Done():
		return fmt.Errorf("discover: waiting for the seeds: %w", ctx.Err())
	}
	if err := c.flushRobotsMaps(ctx); err != nil {
		return err
	}
	if r == nil || r.SkipReason != "" || (r.FailReason != nil && *r.FailReason != "") || r.PageKey == "" ||
		r.HTTPStatus == nil || *r.HTTPStatus < 200 || *r.HTTPStatus > 299 {
		return nil
	}
	task, depth, err := c.cfg.Queue.TaskAtDepth(ctx, r.TaskID)
	if err != nil {
		if downloader.ErrorCode(err) == downloader.ENOTFOUND {
			return nil // not the queue's (cannot happen from the lease loop)
		}
		return fmt.Errorf("discover: task %s: %w", r.TaskID, err)
	}
	if depth >= c.cfg.MaxDepth {
		return nil
	}
	page, err := c.cfg.Pages.Page(ctx, r.PageKey)
	if err != nil {
		if downloader.ErrorCode(err) == downloader.ENOTFOUND {
			return nil
		}
		return fmt.Errorf("discover: page of task %s: %w", r.TaskID, err)
	}
	base, err := url.Parse(task.URL)
	if err != nil {
		return nil
	}
	// The page store keeps one copy per body, with the metadata of the first URL stored
	// with it: its final URL (after redirects) is this task's only when the URLs match.
	if page.URL == task.URL && page.FinalURL != "" {
		if fu, err := url.Parse(page.FinalURL); err == nil {
			base = fu
		}
	}
	if !task.ShouldRender && LooksLikeSitemap(page.Body) {
		sm, err := ParseSitemap(page.Body)
		if err == nil {
			return c.sitemap(ctx, &task, depth, sm)
		}
		if !errors.Is(err, ErrNotSitemap) {
			c.log.Debug("sitemap does not parse", "url", task.URL, "error", err)
			return nil
		}
	}
	if !IsHTML(page.ContentType, page.Body) {
		return nil
	}
	links := ExtractLinks(page.Body, base)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.NofollowLinkCount += links.NofollowCount
	if links.IsNofollow {
		c.stats.NofollowPageCount++
	}
	if links.IsNoindex {
		c.stats.NoindexPageCount++
	}
	return c.submitLocked(ctx, &task, links.URLs, depth+1, task.ShouldRender, false)
}

// sitemap queues a sitemap's URLs: an index's sitemaps at its own depth (a sitemap is not
// a link hop), a urlset's pages one deeper.
func (c *Crawler) sitemap(ctx context.Context, from *downloader.Task, depth int, sm *Sitemap) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.SitemapCount++
	c.stats.SitemapURLCount += len(sm.URLs)
	if sm.IsIndex {
		return c.submitLocked(ctx, from, sm.URLs, depth, false, true)
	}
	return c.submitLocked(ctx, from, sm.URLs, depth+1, false, false)
}

// flushRobotsMaps queues the sitemaps robots.txt named, at depth 0 (the site names them
// as its entry points, as the seeds are).
func (c *Crawler) flushRobotsMaps(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.robotsMaps) == 0 {
		return nil
	}
	maps := c.robotsMaps
	c.robotsMaps = nil
	if err := c.submitLocked(ctx, nil, maps, 0, false, true); err != nil {
		c.robotsMaps = append(maps, c.robotsMaps...)
		return err
	}
	return nil
}

// submitLocked canonicalises raw, keeps what is in scope and under the bound, and queues
// it at depth; each new site in scope gets its sitemaps queued too. from (nil for
// robots.txt's sitemaps) gives its min_interval_ms to URLs of its own domain. Sitemaps
// (isSitemap) need only their host in scope: the patterns are for pages. Requires c.mu
// held.
func (c *Crawler) submitLocked(ctx context.Context, from *downloader.Task, raw []string, depth int, shouldRender, isSitemap bool) error {
	if depth > c.cfg.MaxDepth {
		return nil
	}
	seen := make(map[string]bool, len(raw))
	var tasks []downloader.Task
	for _, s := range raw {
		u, err := url.Parse(s)
		if err != nil {
			continue
		}
		cu, domain, err := Canonical(u)
		if err != nil || seen[cu] {
			continue
		}
		seen[cu] = true
		if isSitemap && !c.cfg.Scope.AllowsHost(domain) || !isSitemap && !c.cfg.Scope.Allows(cu, domain) {
			c.stats.OutOfScopeCount++
			continue
		}
		t := downloader.Task{URL: cu, Domain: domain, ShouldStore: true, ShouldRender: shouldRender}
		if from != nil && from.Domain == domain && from.MinIntervalMs != nil {
			ms := *from.MinIntervalMs
			t.MinIntervalMs = &ms
		}
		tasks = append(tasks, t)
	}
	for len(tasks) > 0 {
		n := min(len(tasks), submitChunk)
		chunk := tasks[:n]
		tasks = tasks[n:]
		if c.cfg.MaxPageCount > 0 {
			room := c.cfg.MaxPageCount - c.cfg.Queue.TotalCount()
			if room <= 0 {
				c.stats.OverMaxPageCount += len(chunk) + len(tasks)
				return nil
			}
			if len(chunk) > room {
				// Some may be duplicates, which take no room: the bound is kept, maybe
				// a few short.
				c.stats.OverMaxPageCount += len(chunk) - room + len(tasks)
				chunk, tasks = chunk[:room], nil
			}
		}
		added, err := c.cfg.Queue.SubmitAtDepth(ctx, chunk, depth)
		if err != nil {
			return fmt.Errorf("discover: queue %d URLs: %w", len(chunk), err)
		}
		c.stats.DiscoveredCount += added
		for _, t := range chunk {
			if u, err := url.Parse(t.URL); err == nil {
				if err := c.siteLocked(ctx, u); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// submitChunk bounds one submit of found URLs.
const submitChunk = 1000

// siteLocked queues u's site's /sitemap.xml the first time this process sees the site.
// Requires c.mu held.
func (c *Crawler) siteLocked(ctx context.Context, u *url.URL) error {
	if !c.cfg.ShouldReadSitemaps {
		return nil
	}
	site := u.Scheme + "://" + u.Host
	if c.sites[site] {
		return nil
	}
	c.sites[site] = true
	sm := site + "/sitemap.xml"
	cu, domain, err := CanonicalString(sm)
	if err != nil || !c.cfg.Scope.AllowsHost(domain) {
		return nil
	}
	if c.cfg.MaxPageCount > 0 && c.cfg.Queue.TotalCount() >= c.cfg.MaxPageCount {
		c.stats.OverMaxPageCount++
		return nil
	}
	added, err := c.cfg.Queue.SubmitAtDepth(ctx, []downloader.Task{{URL: cu, Domain: domain, ShouldStore: true}}, 0)
	if err != nil {
		return fmt.Errorf("discover: queue %s: %w", cu, err)
	}
	c.stats.DiscoveredCount += added
	return nil
}

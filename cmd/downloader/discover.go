package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"downloader"
	"downloader/discover"
	"downloader/lease"
	"downloader/localqueue"
)

// discoverConfig is the crawl's discovery flags (package discover).
type discoverConfig struct {
	MaxDepth           int
	MaxPageCount       int
	Scope              string
	ScopeHostList      string
	ScopeInclude       string
	ScopeExclude       string
	ShouldReadSitemaps bool
}

// addDiscoverFlags declares the discovery flags into d.
func addDiscoverFlags(fs *flag.FlagSet, d *discoverConfig) {
	fs.IntVar(&d.MaxDepth, "max-depth", 0, "follow the links of the pages fetched (or rendered) up to this many links from a seed, within --scope; 0 crawls the list only")
	fs.IntVar(&d.MaxPageCount, "max-page-count", 0, "with --max-depth: queue at most this many tasks in all (seeds, pages found, sitemaps); 0: no bound but the depth")
	fs.StringVar(&d.Scope, "scope", string(discover.ScopeHost), "with --max-depth: the hosts links are followed to: host (the seeds' hosts), domain (the seeds' registrable domains, by the public suffix list), hosts (--scope-host-list), pattern (--scope-include alone)")
	fs.StringVar(&d.ScopeHostList, "scope-host-list", "", "with --scope hosts: the hosts, comma-separated")
	fs.StringVar(&d.ScopeInclude, "scope-include", "", "with --max-depth: follow only URLs this regular expression (RE2) matches, in their canonical form")
	fs.StringVar(&d.ScopeExclude, "scope-exclude", "", "with --max-depth: never follow URLs this regular expression (RE2) matches, in their canonical form")
	fs.BoolVar(&d.ShouldReadSitemaps, "should-read-sitemaps", true, "with --max-depth: queue each site's /sitemap.xml and the Sitemap: lines of its robots.txt (indexes and .gz too)")
}

// discovery is the crawl's discovery as newEntryA wires it: the crawler is built once the
// local queue is open (attach).
type discovery struct {
	cfg     discover.Config // without Queue and Pages
	crawler *discover.Crawler
	log     *slog.Logger
}

// newDiscovery checks the flags; nil without --max-depth.
func newDiscovery(d discoverConfig, logger *slog.Logger) (*discovery, error) {
	if d.MaxDepth < 0 {
		return nil, downloader.Invalidf("max_depth", "--max-depth must not be negative")
	}
	if d.MaxDepth == 0 {
		return nil, nil
	}
	var hosts []string
	if d.ScopeHostList != "" {
		hosts = strings.Split(d.ScopeHostList, ",")
	}
	scope, err := discover.NewScope(discover.ScopeConfig{Kind: discover.ScopeKind(d.Scope), HostList: hosts,
		Include: d.ScopeInclude, Exclude: d.ScopeExclude})
	if err != nil {
		return nil, err
	}
	if d.MaxPageCount < 0 {
		return nil, downloader.Invalidf("max_page_count", "--max-page-count must not be negative")
	}
	return &discovery{log: logger, cfg: discover.Config{Scope: scope, MaxDepth: d.MaxDepth, MaxPageCount: d.MaxPageCount,
		ShouldReadSitemaps: d.ShouldReadSitemaps, Logger: logger}}, nil
}

// attach builds the crawler over the open queue and the page store, and returns the
// lease loop's source: the queue, whose reports go through the crawler first.
func (d *discovery) attach(q *localqueue.Queue, pages downloader.PageStore) (lease.Source, error) {
	cfg := d.cfg
	cfg.Queue, cfg.Pages = discoverQueue{q: q}, pages
	cr, err := discover.New(cfg)
	if err != nil {
		return nil, err
	}
	d.crawler = cr
	return discoverSource{Queue: q, crawler: cr}, nil
}

// robotsSitemaps is robots.Config.Sitemaps: nil without discovery.
func (d *discovery) robotsSitemaps() func(site string, urls []string) {
	if d == nil || !d.cfg.ShouldReadSitemaps {
		return nil
	}
	return func(site string, urls []string) {
		if d.crawler != nil {
			d.crawler.RobotsSitemaps(site, urls)
		}
	}
}

// discoverSource is the local queue as the lease loop's source, with discovery: a task's
// links are queued before the queue takes its report (discover.Crawler.AfterReport), so
// the task is finished only once what it links to is queued.
type discoverSource struct {
	*localqueue.Queue
	crawler *discover.Crawler
}

func (s discoverSource) Report(ctx context.Context, r *downloader.Report) error {
	if err := s.crawler.AfterReport(ctx, r); err != nil {
		return err
	}
	return s.Queue.Report(ctx, r)
}

// discoverQueue is discover.Queue over the local queue.
type discoverQueue struct{ q *localqueue.Queue }

func (a discoverQueue) SubmitAtDepth(ctx context.Context, tasks []downloader.Task, depth int) (int, error) {
	res, err := a.q.SubmitAtDepth(ctx, tasks, depth)
	n := 0
	for _, r := range res {
		if !r.IsDuplicate {
			n++
		}
	}
	return n, err
}

func (a discoverQueue) TaskAtDepth(ctx context.Context, taskID string) (downloader.Task, int, error) {
	rec, err := a.q.Task(ctx, taskID)
	if err != nil {
		return downloader.Task{}, 0, err
	}
	return rec.Task, rec.Depth, nil
}

func (a discoverQueue) TotalCount() int { return a.q.Counts().TotalCount() }

// seedDiscovery reads the crawl file's valid URLs as the seeds (the scope and their
// sites' sitemaps), before any of them is queued: on a resume too, so that the scope is
// the same.
func seedDiscovery(ctx context.Context, d *discovery, q *localqueue.Queue, path string) error {
	if d == nil || d.crawler == nil {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	var seeds []downloader.Task
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseCrawlLine(line)
		if err == nil {
			t, err = q.CheckTask(t)
		}
		if err == nil {
			seeds = append(seeds, t)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return d.crawler.Seeds(ctx, seeds)
}

// duplicatePayloadCount counts the finished tasks whose page (by payload digest, the page
// key) an earlier task already stored: kept once in the page store, written as WARC
// revisit records by export.
func duplicatePayloadCount(ctx context.Context, q *localqueue.Queue) (int, error) {
	seen := map[string]bool{}
	n := 0
	err := q.RangeDone(ctx, func(_ *downloader.Task, r *downloader.Report) bool {
		if r.PageKey == "" {
			return true
		}
		if seen[r.PageKey] {
			n++
		}
		seen[r.PageKey] = true
		return true
	})
	return n, err
}

// crawlFound is what the crawl summary tells of discovery and dedup.
type crawlFound struct {
	duplicateCount int
	duplicateErr   error
	discovery      *discovery // nil without --max-depth
	stats          discover.Stats
}

// collectDiscovery reads what printDiscovery prints, while the store is open.
func collectDiscovery(ctx context.Context, d *discovery, q *localqueue.Queue) crawlFound {
	f := crawlFound{}
	f.duplicateCount, f.duplicateErr = duplicatePayloadCount(ctx, q)
	if d != nil && d.crawler != nil {
		f.discovery, f.stats = d, d.crawler.Stats()
	}
	return f
}

// printDiscovery writes the discovery and dedup lines of the crawl summary.
func printDiscovery(w io.Writer, f crawlFound) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	switch {
	case f.duplicateErr != nil:
		fmt.Fprintf(tw, "  duplicate payloads\t?\t%v\n", f.duplicateErr)
	case f.duplicateCount > 0:
		fmt.Fprintf(tw, "  duplicate payloads\t%d\tstored once, WARC revisit records\n", f.duplicateCount)
	}
	if d := f.discovery; d != nil {
		s := f.stats
		fmt.Fprintf(tw, "  discovered\t%d\tnew URLs from links and sitemaps (scope %s, max depth %d)\n", s.DiscoveredCount, d.cfg.Scope, d.cfg.MaxDepth)
		fmt.Fprintf(tw, "    out of scope\t%d\n", s.OutOfScopeCount)
		fmt.Fprintf(tw, "    nofollow\t%d links, %d pages\n", s.NofollowLinkCount, s.NofollowPageCount)
		if s.NoindexPageCount > 0 {
			fmt.Fprintf(tw, "    noindex pages\t%d\tkept (an archive is not an index)\n", s.NoindexPageCount)
		}
		fmt.Fprintf(tw, "    sitemaps read\t%d\twith %d URLs\n", s.SitemapCount, s.SitemapURLCount)
		if s.OverMaxPageCount > 0 {
			fmt.Fprintf(tw, "    over --max-page-count\t%d\tnot queued\n", s.OverMaxPageCount)
		}
	}
	_ = tw.Flush()
}

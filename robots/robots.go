// Package robots makes the standalone crawl obey robots.txt (RFC 9309). In a standalone
// crawl the embedded local queue plays the sampler's and the scheduler's parts (SPEC §1),
// and robots.txt belongs there; with a real scheduler (entry A from it, entries B and C)
// it stays upstream and this package is not used.
//
// Runner wraps entry A's runner (the engine). Before a task runs it looks up the rules of
// the task's site (scheme, host and port), fetching /robots.txt once per site through the
// engine's one admission pipeline like any request to that origin (Fetcher, the engine's
// FetchUnstored: the domain's slot, the global cap, the shared admission in cluster mode,
// the egress verdict, the observers; nothing stored), and then:
//
//	robots.txt answered               the task
//	2xx                               runs if the rules for our product token allow its
//	                                  path, with min_interval_ms raised to the Crawl-delay;
//	                                  else it is skipped (skip_reason robots_disallowed)
//	4xx but 429 ("unavailable")       runs: no rules (RFC 9309 §2.3.1.3)
//	5xx, 429, no answer               waits: the site is disallowed (§2.3.1.4) and
//	  ("unreachable")                 robots.txt is fetched again after a backoff; after
//	                                  MaxAttemptCount such answers its tasks are skipped
//	                                  (robots_unavailable) until the entry expires
//	our own failure (not reached)     waits a second, nothing counted (seed 002)
//
// Rules are cached for CacheFor (24 h, the most RFC 9309 §2.4 allows). A skipped task is
// reported with SkipReason, not a fail_reason: the closed set of SPEC §4 stays as it is.
// For robots_unavailable the report's http_status, fail_reason and has_reached_origin are
// those of the robots.txt request, to say why.
package robots

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/temoto/robotstxt"

	"downloader"
	"downloader/clock"
)

// Defaults.
const (
	CacheFor               = 24 * time.Hour
	DefaultMaxAttemptCount = 3
	// retryBase is the wait after the first unreachable answer, doubled after each.
	retryBase = 5 * time.Second
	retryMax  = 5 * time.Minute
	// ownRetry is the wait after a failure of our own.
	ownRetry = time.Second
	// maxSites bounds the cache; past it, expired entries are dropped.
	maxSites = 100_000
)

// TaskRunner is entry A's runner (*engine.Engine), which Runner wraps.
type TaskRunner interface {
	RunTask(ctx context.Context, t *downloader.Task) downloader.LeaseReply
	Stop()
}

// Fetcher runs a robots.txt request (*engine.Engine): one plain GET of u for the leased
// task t, through the same admission pipeline as t itself, under entry A's policy with
// interval as the domain's min interval, storing nothing. It returns the outcome, or nil
// and when to come again when nothing was sent for the service's own reasons (a stop, a
// slot past what t's lease allows).
type Fetcher interface {
	FetchUnstored(ctx context.Context, t *downloader.Task, u *url.URL, interval time.Duration) (out *downloader.Outcome, retryAfter time.Duration)
}

// Config wires a Runner. Next and Fetcher are required.
type Config struct {
	Next TaskRunner
	// Fetcher makes the robots.txt requests; the request's timeout is the engine's.
	Fetcher Fetcher
	Clock   clock.Clock
	Logger  *slog.Logger
	// UserAgent is the service's User-Agent; its product token (the leading name, as
	// "downloader" in "downloader/1.0 (+https://...)") picks the robots.txt group.
	UserAgent string
	// MaxAttemptCount is how many unreachable answers (5xx, 429, no answer) give up a
	// site's tasks as robots_unavailable; default 3.
	MaxAttemptCount int
	// CrawlDelay, when set, is told each site's Crawl-delay for our group (the local
	// queue's SetCrawlDelay), so that the queue paces the domain's tasks to it.
	CrawlDelay func(domain string, d time.Duration)
	// Sitemaps, when set, is told the Sitemap: lines of each robots.txt read (the crawl's
	// discovery queues them, discover.Crawler.RobotsSitemaps). It is called with the
	// runner's lock held: it must not block.
	Sitemaps func(site string, urls []string)
}

// Runner is safe for concurrent use. Create it with New.
type Runner struct {
	cfg   Config
	log   *slog.Logger
	token string

	mu    sync.Mutex
	sites map[string]*site // by "scheme://host:port"

	// stopping ends when Stop is called: tasks waiting for a robots.txt go back.
	stopping context.Context
	stop     context.CancelFunc
}

type siteState int

const (
	stateRules       siteState = iota // rules (nil: allow all)
	stateUnreachable                  // retry the fetch at retryAt
	stateUnavailable                  // gave up: skip the tasks until expiresAt
)

// site is one site's robots.txt as known. While a fetch is in progress, fetching is
// closed when it ends.
type site struct {
	fetching   chan struct{}
	state      siteState
	group      *robotstxt.Group // stateRules; nil allows everything
	expiresAt  time.Time        // stateRules, stateUnavailable: fetch again after
	retryAt    time.Time        // stateUnreachable
	failCount  int
	failed     *downloader.Outcome // the last unreachable answer
	crawlDelay time.Duration
	known      bool // a fetch ended at least once
}

// New returns a runner over cfg.Next.
func New(cfg Config) (*Runner, error) {
	if cfg.Next == nil || cfg.Fetcher == nil {
		return nil, errors.New("robots: Next and Fetcher are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxAttemptCount <= 0 {
		cfg.MaxAttemptCount = DefaultMaxAttemptCount
	}
	r := &Runner{cfg: cfg, log: cfg.Logger.With("component", "robots"), token: ProductToken(cfg.UserAgent),
		sites: map[string]*site{}}
	r.stopping, r.stop = context.WithCancel(context.Background())
	return r, nil
}

// ProductToken returns the product token of a User-Agent: its leading run of letters,
// '_' and '-' (RFC 9309 §2.2.1), lower case; "downloader" when there is none.
func ProductToken(userAgent string) string {
	i := strings.IndexFunc(userAgent, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_' || r == '-')
	})
	if i < 0 {
		i = len(userAgent)
	}
	if i == 0 {
		return "downloader"
	}
	return strings.ToLower(userAgent[:i])
}

// Stop stops the runner it wraps and makes the tasks waiting for a robots.txt go back.
func (r *Runner) Stop() {
	r.stop()
	r.cfg.Next.Stop()
}

// verdict is what robots.txt says about one task.
type verdict struct {
	allow      bool
	skip       downloader.SkipReason
	wait       time.Duration       // > 0: hand the task back for this long
	crawlDelay time.Duration       // allow: the site's Crawl-delay for us
	failed     *downloader.Outcome // skip robots_unavailable: the robots.txt answer
}

// RunTask runs t through robots.txt, then through the wrapped runner if allowed.
func (r *Runner) RunTask(ctx context.Context, t *downloader.Task) downloader.LeaseReply {
	u, domain, err := downloader.ParseTargetURL("url", t.URL)
	if err != nil || t.MinIntervalMs == nil {
		return r.cfg.Next.RunTask(ctx, t) // the engine reports it as invalid_task
	}
	interval := time.Duration(*t.MinIntervalMs) * time.Millisecond
	v := r.check(ctx, t, u, domain, interval)
	switch {
	case v.wait > 0:
		return downloader.LeaseReply{Release: true, RetryAfter: v.wait}
	case v.skip != "":
		rep := &downloader.Report{TaskID: t.TaskID, FetchedAt: r.cfg.Clock.Now().UTC(), SkipReason: v.skip,
			Summary: downloader.Summary{Domain: domain}}
		if v.failed != nil {
			rep.Summary = v.failed.Summary(domain)
		}
		r.log.Info("task skipped by robots.txt", "task_id", t.TaskID, "url", t.URL, "skip_reason", v.skip)
		return downloader.LeaseReply{Report: rep}
	}
	if v.crawlDelay > interval {
		// The sampler's rule (SPEC §1): min_interval_ms = max(crawl_delay, the interval).
		ms := min(v.crawlDelay, downloader.MaxMinInterval).Milliseconds()
		tt := *t
		tt.MinIntervalMs = &ms
		t = &tt
	}
	return r.cfg.Next.RunTask(ctx, t)
}

// check returns the verdict for t, fetching the site's robots.txt when it is not known.
func (r *Runner) check(ctx context.Context, t *downloader.Task, u *url.URL, domain string, interval time.Duration) verdict {
	key := strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
	for {
		now := r.cfg.Clock.Now()
		r.mu.Lock()
		s := r.sites[key]
		if s != nil && s.fetching != nil {
			wait := s.fetching
			r.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return verdict{wait: ownRetry}
			case <-r.stopping.Done():
				return verdict{wait: ownRetry}
			}
		}
		if s != nil && s.known {
			if v, ok := s.verdict(now, u, r.token); ok {
				r.mu.Unlock()
				return v
			}
		}
		if s == nil {
			r.pruneLocked(now)
			s = &site{}
			r.sites[key] = s
		}
		s.fetching = make(chan struct{})
		// Asking again (after 24 h, or after an unreachable answer) keeps the spacing
		// the site asked for.
		iv := max(interval, s.crawlDelay)
		r.mu.Unlock()

		out, retryAfter := r.fetch(ctx, t, u, iv)

		r.mu.Lock()
		r.learn(s, out, r.cfg.Clock.Now(), domain, key)
		close(s.fetching)
		s.fetching = nil
		r.mu.Unlock()
		if out == nil || !out.FailReason.HasReachedOrigin() {
			// Our own problem: try again when the engine says, or soon; count nothing.
			return verdict{wait: max(retryAfter, ownRetry)}
		}
	}
}

// verdict answers for u from what is known, or ok=false when robots.txt must be fetched
// (again). Requires r.mu held.
func (s *site) verdict(now time.Time, u *url.URL, token string) (verdict, bool) {
	switch s.state {
	case stateRules:
		if !now.Before(s.expiresAt) {
			return verdict{}, false
		}
		if s.group == nil || s.group.Test(pathOf(u)) {
			return verdict{allow: true, crawlDelay: s.crawlDelay}, true
		}
		return verdict{skip: downloader.SkipRobotsDisallowed}, true
	case stateUnreachable:
		if !now.Before(s.retryAt) {
			return verdict{}, false
		}
		return verdict{wait: s.retryAt.Sub(now)}, true
	case stateUnavailable:
		if !now.Before(s.expiresAt) {
			return verdict{}, false
		}
		return verdict{skip: downloader.SkipRobotsUnavailable, failed: s.failed}, true
	}
	return verdict{}, false
}

// learn records the answer out of a robots.txt fetch in s. Requires r.mu held.
func (r *Runner) learn(s *site, out *downloader.Outcome, now time.Time, domain, key string) {
	if out == nil || !out.FailReason.HasReachedOrigin() {
		return // not fetched: nothing learnt
	}
	st := out.HTTPStatus
	switch {
	case st >= 200 && st < 300:
		data, err := robotstxt.FromBytes(out.Body)
		if err != nil {
			// RFC 9309 §2.2: rules that cannot be parsed are ignored; none left allow all.
			r.log.Warn("robots.txt does not parse: no rules applied", "site", key, "error", err)
			data = nil
		}
		s.state, s.expiresAt, s.failCount, s.failed, s.known = stateRules, now.Add(CacheFor), 0, nil, true
		s.group, s.crawlDelay = nil, 0
		if data != nil {
			s.group = data.FindGroup(r.token)
			s.crawlDelay = s.group.CrawlDelay
		}
		if r.cfg.CrawlDelay != nil {
			r.cfg.CrawlDelay(domain, s.crawlDelay)
		}
		if r.cfg.Sitemaps != nil && data != nil && len(data.Sitemaps) > 0 {
			r.cfg.Sitemaps(key, data.Sitemaps)
		}
		r.log.Debug("robots.txt read", "site", key, "crawl_delay_ms", s.crawlDelay.Milliseconds())
	case st >= 400 && st < 500 && st != 429:
		s.state, s.group, s.crawlDelay, s.expiresAt, s.failCount, s.failed, s.known = stateRules, nil, 0, now.Add(CacheFor), 0, nil, true
	default: // 5xx, 429, a 3xx left unfollowed, or no answer at all
		s.failCount++
		s.failed, s.known = out, true
		if s.failCount >= r.cfg.MaxAttemptCount {
			s.state, s.expiresAt = stateUnavailable, now.Add(CacheFor)
			r.log.Warn("robots.txt unreachable: the site's tasks are skipped", "site", key, "http_status", st, "fail_reason", out.FailReason)
			return
		}
		wait := retryBase << (s.failCount - 1)
		s.state, s.retryAt = stateUnreachable, now.Add(min(wait, retryMax))
	}
}

// fetch requests u's /robots.txt for t through the engine's pipeline, with the domain's
// interval, cut short when the runner stops. It returns nil (and when to come again)
// when the request was not made for our own reasons.
func (r *Runner) fetch(ctx context.Context, t *downloader.Task, u *url.URL, interval time.Duration) (*downloader.Outcome, time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(r.stopping, cancel)
	defer stop()
	ru := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/robots.txt"}
	out, retryAfter := r.cfg.Fetcher.FetchUnstored(ctx, t, ru, interval)
	if out != nil && r.stopping.Err() != nil && out.HTTPStatus == 0 {
		return nil, 0
	}
	return out, retryAfter
}

// pruneLocked drops expired entries once the cache is full. Requires r.mu held.
func (r *Runner) pruneLocked(now time.Time) {
	if len(r.sites) < maxSites {
		return
	}
	for k, s := range r.sites {
		if s.fetching == nil && (s.state != stateUnreachable && !now.Before(s.expiresAt) ||
			s.state == stateUnreachable && !now.Before(s.retryAt)) {
			delete(r.sites, k)
		}
	}
}

// pathOf is the part of u robots.txt rules match: the path and the query (RFC 9309 §2.2.2).
func pathOf(u *url.URL) string {
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	if u.RawQuery != "" {
		p += "?" + u.RawQuery
	}
	return p
}

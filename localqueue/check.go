package localqueue

import (
	"net/url"
	"strings"

	"downloader"
)

// CheckTask validates a task as Submit will (the package's CheckTask with the queue's
// default interval and header policy), then refuses what entries B and C refuse beyond it: a URL that names
// a forbidden address directly (Config.CheckURLHost, the SSRF guard's literal-address
// check). POST /v1/tasks and a crawl's task file call it per task to name the bad one;
// errors are EINVALID naming the field, "url" for the guard's.
func (q *Queue) CheckTask(t downloader.Task) (downloader.Task, error) {
	c, err := CheckTask(t, q.cfg.DefaultMinInterval, q.cfg.HeaderPolicy)
	if err != nil || q.cfg.CheckURLHost == nil {
		return c, err
	}
	u, err := url.Parse(strings.TrimSpace(c.URL))
	if err != nil {
		return c, downloader.Invalidf("url", "url is not a URL: %v", err) // cannot happen: CheckTask parsed it
	}
	if err := q.cfg.CheckURLHost(u.Hostname()); err != nil {
		return c, err
	}
	return c, nil
}

// Package console is the operators' console, served by the downloader itself: three
// server-rendered pages (html/template, assets embedded, nothing fetched from any other
// host) and the JSON API behind each of them.
//
//	GET /             domain runtime (downloader:domain_runtime): status, the egress state,
//	                  the instance list (cluster mode), the over-limit table per entry, the
//	                  per-domain table (sort, search, paging), the max_concurrent_count
//	                  control, fetch and probe actions
//	GET /probes       probe records: 24 h overview, causes, recent samples
//	GET /stats        fetch statistics: the politeness and capacity ceilings, the achieved
//	                  rate, the global cap, the renderer pool
//	GET /v1/console/runtime, /v1/console/probes, /v1/console/stats   the pages' numbers
//	GET /v1/console/hours   the 24 hourly buckets behind the pages' charts
//	GET /v1/domains   the per-domain table: sort, order, q, limit, cursor
//	POST /console/settings   the max_concurrent_count form (admin only, see server/auth.go)
//
// The pages change nothing themselves. Their controls call the service's own API from the
// browser (POST /v1/render, POST /v1/probe) or post the cap form, with the signed-in
// session's CSRF token or the admin token the operator typed, so the console has no power
// the API does not have. No control lowers a domain's interval: fetch and probe send the
// domain's current min_interval_ms. Who may see the pages is the server's access policy.
package console

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"downloader"
	"downloader/clock"
	"downloader/internal/httpjson"
	"downloader/observe"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Config wires a Console (deps.go). Settings, Limiter, Gate, Observer and Domains are
// required.
type Config struct {
	Clock    clock.Clock // default clock.Real{}
	Settings SettingsService
	Limiter  LimiterStats
	Gate     GateView
	// Cluster is the instance list in cluster mode; nil on the embedded store.
	Cluster ClusterView
	// Egress is the egress detector's state at now; nil (or ok false): no detector.
	Egress   func(now time.Time) (st downloader.EgressState, ok bool)
	Observer *observe.Observer
	Domains  *observe.DomainTable
	// Renderer reports the renderer pool; nil when the service has none.
	Renderer func() downloader.RendererStats
	// Session returns the role and CSRF token of the session a request was signed in
	// with (server.Session); nil or "" when there is none (no tokens configured, or a
	// bearer token). The pages show the role and send the token with their writes.
	Session func(r *http.Request) (role, csrfToken string)
	// LocalQueue reads the local queue's counts for the queue panel; ok is false (or it is
	// nil) when a scheduler feeds entry A: no panel.
	LocalQueue func() (c observe.QueueCounts, ok bool)
	Logger     *slog.Logger // default: discard
}

// Console serves the pages and their JSON. Safe for concurrent use; create it with New.
type Console struct {
	cfg   Config
	log   *slog.Logger
	pages map[string]*template.Template
}

// New parses the embedded templates.
func New(cfg Config) (*Console, error) {
	if cfg.Settings == nil || cfg.Limiter == nil || cfg.Gate == nil || cfg.Observer == nil || cfg.Domains == nil {
		return nil, fmt.Errorf("console: Settings, Limiter, Gate, Observer and Domains are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Console{cfg: cfg, log: cfg.Logger, pages: map[string]*template.Template{}}
	for _, name := range []string{"runtime", "probes", "stats", "error"} {
		t, err := template.New("layout.html").Funcs(funcs()).ParseFS(templateFS, "templates/layout.html", "templates/charts.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", name, err)
		}
		c.pages[name] = t
	}
	return c, nil
}

// Register adds the console's routes to mux (server.Config.Extra).
func (c *Console) Register(mux *http.ServeMux) {
	mux.Handle("GET /{$}", c.page("runtime", c.runtimePage))
	mux.Handle("GET /probes", c.page("probes", c.probesPage))
	mux.Handle("GET /stats", c.page("stats", c.statsPage))
	assets, _ := fs.Sub(assetFS, "assets")
	mux.Handle("GET /assets/", c.assets(http.StripPrefix("/assets/", http.FileServerFS(assets))))
	mux.Handle("GET /v1/console/runtime", c.api(func(r *http.Request) (any, error) { return c.RuntimeOf(r.Context()), nil }))
	mux.Handle("GET /v1/console/probes", c.api(func(r *http.Request) (any, error) {
		n, err := intParam(r.URL.Query(), "limit", DefaultSampleLimit, 1, observe.DefaultSampleCount)
		if err != nil {
			return nil, err
		}
		return c.Probes(n), nil
	}))
	mux.Handle("GET /v1/console/stats", c.api(func(r *http.Request) (any, error) { return c.Stats(), nil }))
	mux.Handle("GET /v1/console/hours", c.api(func(r *http.Request) (any, error) { return c.Hours(), nil }))
	mux.Handle("POST /console/settings", c.settingsForm())
	mux.Handle("GET /v1/domains", c.api(func(r *http.Request) (any, error) {
		q, err := DomainQueryOf(r.URL.Query())
		if err != nil {
			return nil, err
		}
		return c.cfg.Domains.Page(c.cfg.Clock.Now(), q)
	}))
}

// DefaultSampleLimit is how many probe samples the page and the API show by default.
const DefaultSampleLimit = 50

// securityHeaders keep the pages to themselves: no script, style or connection to any
// other origin, no framing.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

func (c *Console) assets(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}

// page renders one page from the view its builder returns; a builder's error is a 400
// (bad query parameters) shown on the page's own layout.
func (c *Console) page(name string, build func(r *http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-store")
		view, err := build(r)
		status, tmpl := http.StatusOK, name
		if err == nil && c.cfg.Session != nil {
			if v, ok := view.(interface{ setSession(role, csrf string) }); ok {
				v.setSession(c.cfg.Session(r))
			}
		}
		if err != nil {
			status = httpjson.Status(downloader.ErrorCode(err))
			if status == http.StatusInternalServerError {
				c.log.Error("console page", "page", name, "error", err)
			}
			view = errorView{Base: Base{Page: name}, GeneratedAt: c.now(), Error: downloader.ErrorMessage(err), Field: downloader.ErrorField(err)}
			tmpl = "error"
		}
		var buf strings.Builder
		if err := c.pages[tmpl].Execute(&buf, view); err != nil {
			c.log.Error("console template", "page", tmpl, "error", err)
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(buf.String()))
	})
}

// errorBody and writeJSON are the service's one error body and JSON answer (httpjson).
type errorBody = httpjson.ErrorBody

func writeJSON(w http.ResponseWriter, status int, v any) { httpjson.Write(w, status, v) }

// api answers the JSON of f, or its error as {"error", "field"} with the service's codes.
func (c *Console) api(f func(r *http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		v, err := f(r)
		if err != nil {
			status := httpjson.Status(downloader.ErrorCode(err))
			if status == http.StatusInternalServerError {
				c.log.Error("console api", "path", r.URL.Path, "error", err)
			}
			writeJSON(w, status, errorBody{Error: downloader.ErrorMessage(err), Field: downloader.ErrorField(err)})
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}

// intParam reads an integer query parameter in [lo, hi]; absent means def.
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, downloader.Invalidf(name, "%s must be a whole number between %d and %d", name, lo, hi)
	}
	return n, nil
}

// DomainQueryOf reads the per-domain table's query parameters: sort (a column's JSON
// name, default last_request_at), order (asc or desc; default desc for times and counts,
// asc for the rest), q (a substring of the domain), limit (1–500, default 50), cursor.
func DomainQueryOf(v url.Values) (observe.DomainQuery, error) {
	q := observe.DomainQuery{Sort: v.Get("sort"), Search: v.Get("q"), Cursor: v.Get("cursor")}
	if q.Sort == "" {
		q.Sort = observe.SortLastRequest
	}
	switch v.Get("order") {
	case "":
		q.Descending = defaultDescending(q.Sort)
	case "asc":
	case "desc":
		q.Descending = true
	default:
		return q, downloader.Invalidf("order", "order must be asc or desc")
	}
	n, err := intParam(v, "limit", observe.DefaultPageLimit, 1, observe.MaxPageLimit)
	if err != nil {
		return q, err
	}
	q.Limit = n
	return q, nil
}

func defaultDescending(sort string) bool {
	switch sort {
	case observe.SortLastRequest, observe.SortInFlight, observe.SortRequests, observe.SortMinInterval:
		return true
	}
	return false
}

// now is the console's clock, in UTC.
func (c *Console) now() time.Time { return c.cfg.Clock.Now().UTC() }

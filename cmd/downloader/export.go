package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"downloader/export"
	"downloader/localqueue"
	"downloader/store/embedded"
)

const exportUsage = `usage: downloader export --data-dir DIR [--output FILE] [--warc FILE]

Writes what a crawl left in DIR (which no downloader may be running on): --output one JSON
line per task of its local queue (the summary fields, task_id, url, final_url, page_key,
state, attempt_count, skip_reason), --warc the stored pages as WARC/1.1 (gzipped per
record when FILE ends in .gz). At least one of them. FILE - is standard output.

Flags:

`

func runExport(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dataDir, outputPath, warcPath, userAgent string
	fs.StringVar(&dataDir, "data-dir", "data", "the data dir of the crawl")
	fs.StringVar(&outputPath, "output", "", "write one JSON line per task to this file (- for standard output)")
	fs.StringVar(&warcPath, "warc", "", "write the stored pages to this WARC/1.1 file (gzipped per record when it ends in .gz)")
	fs.StringVar(&userAgent, "user-agent", defaultUserAgent, "the User-Agent the crawl sent, written into the WARC request records")
	fs.Usage = func() {
		fmt.Fprint(stderr, exportUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && !set[f.Name] && envErr == nil {
			envErr = fs.Set(f.Name, v)
		}
	})
	if envErr != nil {
		return envErr
	}
	if fs.NArg() != 0 || (outputPath == "" && warcPath == "") {
		fmt.Fprint(stderr, "downloader export: want --output or --warc, and no arguments\n\n")
		fs.Usage()
		return errUsage
	}
	if _, err := os.Stat(filepath.Join(dataDir, "store")); err != nil {
		return fmt.Errorf("no crawl in --data-dir %s: %w", dataDir, err)
	}
	outs, err := createOutputs(outputPath, warcPath, stdout)
	if err != nil {
		return err
	}
	defer outs.close()
	return outs.write(ctx, dataDir, userAgent, stderr)
}

// outputs are the files --output and --warc name, created before the crawl starts so that
// a bad path fails at once, not after hours of crawling.
type outputs struct {
	lines, warc         io.Writer
	linesPath, warcPath string
	files               []*os.File
}

func createOutputs(linesPath, warcPath string, stdout io.Writer) (*outputs, error) {
	o := &outputs{linesPath: linesPath, warcPath: warcPath}
	open := func(p string) (io.Writer, error) {
		if p == "-" {
			return stdout, nil
		}
		f, err := os.Create(p)
		if err != nil {
			o.close()
			return nil, fmt.Errorf("create %s: %w", p, err)
		}
		o.files = append(o.files, f)
		return f, nil
	}
	var err error
	if linesPath != "" {
		if o.lines, err = open(linesPath); err != nil {
			return nil, err
		}
	}
	if warcPath != "" {
		if linesPath == "-" && warcPath == "-" {
			o.close()
			return nil, errors.New("--output and --warc cannot both be standard output")
		}
		if o.warc, err = open(warcPath); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func (o *outputs) isSet() bool { return o.lines != nil || o.warc != nil }

// close closes the files; call it once, after write.
func (o *outputs) close() {
	for _, f := range o.files {
		_ = f.Close()
	}
	o.files = nil
}

// write exports the data dir (whose service must have stopped) into the outputs and says
// what it wrote on w.
func (o *outputs) write(ctx context.Context, dataDir, userAgent string, w io.Writer) error {
	st, err := embedded.Open(filepath.Join(dataDir, "store"), nil)
	if err != nil {
		return dataDirInUse(fmt.Errorf("open store: %w", err), dataDir)
	}
	defer st.Close()
	opts := export.Options{Lines: o.lines, Pages: st}
	if o.warc != nil {
		ww, err := export.NewWARCWriter(o.warc, strings.HasSuffix(o.warcPath, ".gz"), filepath.Base(o.warcPath),
			"downloader (下载器) export", userAgent, time.Now())
		if err != nil {
			return err
		}
		opts.WARC = ww
	}
	tasks := func(ctx context.Context, f func(*export.Task) bool) error {
		return localqueue.RangeTasks(ctx, st, func(r *localqueue.TaskRecord) bool {
			return f(&export.Task{Status: r.TaskStatus(), Report: r.Report})
		})
	}
	stats, err := export.Export(ctx, tasks, opts)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	for _, f := range o.files {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("write %s: %w", f.Name(), err)
		}
	}
	if o.lines != nil {
		fmt.Fprintf(w, "downloader: %d JSON lines to %s\n", stats.LineCount, o.linesPath)
	}
	if o.warc != nil {
		fmt.Fprintf(w, "downloader: %d pages as WARC (%d bytes) to %s\n", stats.PageCount, stats.WARCByteCount, o.warcPath)
	}
	if stats.MissingCount > 0 {
		fmt.Fprintf(w, "downloader: %d reported pages are no longer in the page store\n", stats.MissingCount)
	}
	return nil
}

// dataDirInUse rewrites the error of a store that another process holds open into one that
// says so, names the lock and suggests --data-dir.
func dataDirInUse(err error, dataDir string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) || strings.Contains(err.Error(), "lock held") {
		lock := filepath.Join(dataDir, "store", "LOCK")
		return fmt.Errorf("data dir %s is in use by another downloader (it holds the lock %s): stop that one, or give this run its own --data-dir", dataDir, lock)
	}
	return err
}

// crawlFlagNames are the flags crawl --help shows: those that apply to a crawl. The
// service's other flags (a scheduler, the cluster store, tokens, egress detection) are
// still accepted, as by serve, but are not a crawl's business.
var crawlFlagNames = []string{
	"output", "warc", "max-depth", "max-page-count", "scope", "scope-host-list", "scope-include", "scope-exclude", "should-read-sitemaps", "data-dir", "default-min-interval-ms", "max-concurrent-count", "should-obey-robots-txt",
	"max-attempt-count", "user-agent", "request-timeout-ms", "connect-to", "allow-private-networks", "egress-proxy", "egress-proxy-credentials-file",
	"render-concurrency", "renderer-endpoint", "renderer-kind", "render-guard-proxy-listen", "should-render-guard-proxy-terminate-tls", "chromium-path", "listen", "shutdown-grace-seconds", "log-level",
}

// printFlags prints the flags of fs named in names, in that order, as PrintDefaults would.
func printFlags(w io.Writer, fs *flag.FlagSet, names []string) {
	sub := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	sub.SetOutput(w)
	for _, n := range names {
		f := fs.Lookup(n)
		if f == nil {
			continue
		}
		sub.Var(f.Value, f.Name, f.Usage)
		sub.Lookup(n).DefValue = f.DefValue
	}
	sub.PrintDefaults()
}

// printQueueExtras adds the local queue's own lines to the crawl summary table: tasks
// skipped by robots.txt (not failures) and retries.
func printQueueExtras(tw *tabwriter.Writer, c localqueue.Counts) {
	if c.SkippedCount > 0 {
		fmt.Fprintf(tw, "  skipped by robots.txt\t%d\tnever fetched (GET /v1/tasks?state=skipped, or --output)\n", c.SkippedCount)
	}
	if c.RetryCount > 0 {
		fmt.Fprintf(tw, "  retries\t%d\n", c.RetryCount)
	}
}

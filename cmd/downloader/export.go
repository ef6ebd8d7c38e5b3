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

	"downloader/localqueue"
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
	outs, err := planOutputs(outputPath, warcPath, stdout)
	if err != nil {
		return err
	}
	return outs.write(ctx, dataDir, userAgent, stderr)
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

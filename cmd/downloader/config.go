package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"downloader"
	"downloader/netguard"
)

// config is every flag of serve (and crawl, which runs the same service).
type config struct {
	Listen               string
	DataDir              string
	DefaultMinIntervalMs int64
	MaxConcurrentCount   int
	LocalQueueLength     int
	ConnectTo            []netguard.Rule
	AllowPrivateNetworks bool
	UserAgent            string
	RequestTimeoutMs     int64
	RenderConcurrency    int
	RendererEndpoint     string
	ChromiumPath         string
	LogLevel             slog.Level
	ShutdownGraceSeconds int
	Lease                leaseConfig // entry A (lease.go)
}

const defaultUserAgent = "downloader/1.0 (+https://example.invalid/crawler)"

// connectToFlag collects repeatable --connect-to values.
type connectToFlag struct{ rules *[]netguard.Rule }

func (f connectToFlag) String() string { return "" }
func (f connectToFlag) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		r, err := netguard.ParseConnectTo(part)
		if err != nil {
			return err
		}
		*f.rules = append(*f.rules, r)
	}
	return nil
}

type levelFlag struct{ l *slog.Level }

func (f levelFlag) String() string {
	if f.l == nil {
		return "info"
	}
	return strings.ToLower(f.l.String())
}
func (f levelFlag) Set(s string) error { return f.l.UnmarshalText([]byte(s)) }

// newFlagSet declares the flags into c with their defaults.
func newFlagSet(name string, c *config, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8080", "address to serve the API and console on")
	fs.StringVar(&c.DataDir, "data-dir", "data", "directory of the embedded store and settings")
	fs.Int64Var(&c.DefaultMinIntervalMs, "default-min-interval-ms", 1000, "interval for B and C requests that carry no min_interval_ms")
	fs.IntVar(&c.MaxConcurrentCount, "max-concurrent-count", 64, "requests in flight across the service (seeds a fresh data dir; the value changed online wins after a restart)")
	fs.IntVar(&c.LocalQueueLength, "local-queue-length", 256, "requests B and C may wait for a global slot before 429 / local_queue_full")
	fs.Var(connectToFlag{&c.ConnectTo}, "connect-to", "HOST1:PORT1:HOST2:PORT2: send requests for HOST1:PORT1 to HOST2:PORT2 (curl style; repeatable or comma-separated; a leading *. matches subdomains)")
	fs.BoolVar(&c.AllowPrivateNetworks, "allow-private-networks", false, "turn the SSRF guard off: allow loopback, private, link-local and metadata addresses")
	fs.StringVar(&c.UserAgent, "user-agent", defaultUserAgent, "User-Agent of every request, plain and rendered")
	fs.Int64Var(&c.RequestTimeoutMs, "request-timeout-ms", 30000, "default timeout of one fetch or render")
	fs.IntVar(&c.RenderConcurrency, "render-concurrency", runtime.NumCPU(), "renders at once (the browser pool size)")
	fs.StringVar(&c.RendererEndpoint, "renderer-endpoint", "", "remote CDP endpoint (e.g. ws://obscura:9222/devtools/browser); empty launches local Chromium")
	fs.StringVar(&c.ChromiumPath, "chromium-path", "/usr/lib/chromium/chromium-headless-shell", "local headless Chromium binary")
	fs.Var(levelFlag{&c.LogLevel}, "log-level", "debug, info, warn or error")
	fs.IntVar(&c.ShutdownGraceSeconds, "shutdown-grace-seconds", 20, "on SIGINT/SIGTERM, how long in-flight requests may finish")
	addLeaseFlags(fs, &c.Lease)
	return fs
}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return "DOWNLOADER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args, then fills every flag not given on the command line from its
// environment variable, then checks the values.
func parseFlags(fs *flag.FlagSet, c *config, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || envErr != nil {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return envErr
	}
	return c.check()
}

func (c *config) check() error {
	switch {
	case c.DefaultMinIntervalMs < 0 || c.DefaultMinIntervalMs > downloader.MaxMinInterval.Milliseconds():
		return fmt.Errorf("--default-min-interval-ms must be between 0 and %d", downloader.MaxMinInterval.Milliseconds())
	case c.MaxConcurrentCount < 1:
		return errors.New("--max-concurrent-count must be at least 1")
	case c.LocalQueueLength < 0:
		return errors.New("--local-queue-length must not be negative")
	case c.RequestTimeoutMs < 1:
		return errors.New("--request-timeout-ms must be at least 1")
	case c.RenderConcurrency < 1:
		return errors.New("--render-concurrency must be at least 1")
	case c.ShutdownGraceSeconds < 0:
		return errors.New("--shutdown-grace-seconds must not be negative")
	case c.DataDir == "":
		return errors.New("--data-dir is required")
	}
	return nil
}

func (c *config) requestTimeout() time.Duration {
	return time.Duration(c.RequestTimeoutMs) * time.Millisecond
}

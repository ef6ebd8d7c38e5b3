// Command downloader is the crawler's fetch-and-render service.
//
//	downloader serve [flags]        run the service (entries A, B, C, console)
//	downloader crawl [flags] FILE   crawl a URL list on this machine, politely
//	downloader export [flags]       write a data dir's tasks as JSON lines, its pages as WARC
//
// Every flag can also be set with an environment variable DOWNLOADER_<FLAG>, upper case
// with dashes as underscores (--max-concurrent-count → DOWNLOADER_MAX_CONCURRENT_COUNT).
// A flag on the command line wins over the environment.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

func main() {
	ctx, stop := notifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "downloader:", err)
		}
		os.Exit(exitCode(err))
	}
}

var errUsage = errors.New("usage")

// exitError carries an exit code other than 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

const usage = `usage: downloader <command> [flags]

commands:
  serve   run the service: entries A (lease loop), B (POST /v1/render), C (POST /v1/probe)
  crawl   crawl a URL list (one URL a line, or JSON lines) on this machine
  export  write a crawl's data dir out: one JSON line per task, the pages as WARC/1.1

Run 'downloader <command> --help' for the flags of a command.
`

// run is the whole program; main only wires the process to it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], getenv, stdout, stderr)
	case "crawl":
		return runCrawl(ctx, args[1:], getenv, stdout, stderr)
	case "export":
		return runExport(ctx, args[1:], getenv, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "downloader: unknown command %q\n\n%s", args[0], usage)
	return errUsage
}

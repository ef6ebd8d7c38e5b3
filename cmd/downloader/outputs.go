package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"downloader/export"
	"downloader/localqueue"
	"downloader/store/embedded"
)

// outputs are the files --output and --warc name. Each is exported whole from the data
// dir into a temporary file beside it, synced, and renamed over the old one only when
// complete: a stop at any moment (Ctrl-C, SIGTERM, a kill, a crash) leaves either the
// previous file or the new complete one, never a shorter one. Since the export reads the
// whole local queue, a resumed crawl's file holds every task of the earlier runs too.
// "-" is standard output, written directly (it cannot be replaced atomically).
type outputs struct {
	linesPath, warcPath string
	stdout              io.Writer
}

// planOutputs checks the paths before a crawl starts, so that a bad one fails at once and
// not after hours of crawling. It does not touch an existing file.
func planOutputs(linesPath, warcPath string, stdout io.Writer) (*outputs, error) {
	if linesPath == "-" && warcPath == "-" {
		return nil, errors.New("--output and --warc cannot both be standard output")
	}
	for _, p := range []string{linesPath, warcPath} {
		if p == "" || p == "-" {
			continue
		}
		f, err := createAtomic(p)
		if err != nil {
			return nil, err
		}
		f.abort()
	}
	return &outputs{linesPath: linesPath, warcPath: warcPath, stdout: stdout}, nil
}

func (o *outputs) isSet() bool { return o.linesPath != "" || o.warcPath != "" }

// usesStdout reports whether one of the outputs is standard output, which then carries
// nothing else (the human summary goes to standard error).
func (o *outputs) usesStdout() bool { return o.linesPath == "-" || o.warcPath == "-" }

// write exports the data dir (whose service must have stopped) into the outputs and says
// what it wrote on w. ctx should not be the one a stop cancels: the export runs after the
// stop, to completion.
func (o *outputs) write(ctx context.Context, dataDir, userAgent string, w io.Writer) error {
	st, err := embedded.Open(filepath.Join(dataDir, "store"), nil)
	if err != nil {
		return dataDirInUse(fmt.Errorf("open store: %w", err), dataDir)
	}
	defer st.Close()
	var files []*atomicFile
	defer func() {
		for _, f := range files {
			f.abort() // a no-op after commit
		}
	}()
	open := func(p string) (io.Writer, error) {
		if p == "-" {
			return o.stdout, nil
		}
		f, err := createAtomic(p)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		return f.f, nil
	}
	opts := export.Options{Pages: st}
	if o.linesPath != "" {
		if opts.Lines, err = open(o.linesPath); err != nil {
			return err
		}
	}
	if o.warcPath != "" {
		out, err := open(o.warcPath)
		if err != nil {
			return err
		}
		ww, err := export.NewWARCWriter(out, strings.HasSuffix(o.warcPath, ".gz"), filepath.Base(o.warcPath),
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
	for _, f := range files {
		if err := f.commit(); err != nil {
			return err
		}
	}
	if o.linesPath != "" {
		fmt.Fprintf(w, "downloader: %d JSON lines to %s\n", stats.LineCount, o.linesPath)
	}
	if o.warcPath != "" {
		fmt.Fprintf(w, "downloader: %d pages as WARC (%d bytes) to %s\n", stats.PageCount, stats.WARCByteCount, o.warcPath)
	}
	if stats.MissingCount > 0 {
		fmt.Fprintf(w, "downloader: %d reported pages are no longer in the page store\n", stats.MissingCount)
	}
	return nil
}

// atomicFile is a file written under a temporary name in the directory of path and
// renamed to path by commit. Not safe for concurrent use.
type atomicFile struct {
	f    *os.File
	path string
	done bool
}

func createAtomic(path string) (*atomicFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &atomicFile{f: f, path: path}, nil
}

// commit makes the written bytes durable and puts them at path in one rename, keeping the
// mode of a file already there (0644 otherwise).
func (a *atomicFile) commit() error {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(a.path); err == nil {
		mode = fi.Mode().Perm()
	}
	err := a.f.Chmod(mode)
	if err == nil {
		err = a.f.Sync()
	}
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(a.f.Name(), a.path)
	}
	if err != nil {
		_ = os.Remove(a.f.Name())
		a.done = true
		return fmt.Errorf("write %s: %w", a.path, err)
	}
	a.done = true
	// The rename is durable once the directory is synced.
	if d, err := os.Open(filepath.Dir(a.path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// abort drops the temporary file; the file at path is untouched.
func (a *atomicFile) abort() {
	if a.done {
		return
	}
	a.done = true
	_ = a.f.Close()
	_ = os.Remove(a.f.Name())
}

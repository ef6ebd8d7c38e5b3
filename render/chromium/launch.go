// Package chromium launches the local headless Chromium the render pool drives: its flags,
// its own locked user data directory per launch (swept of dead launches' directories),
// and a cancellation that kills the whole process tree. The pool (package render) decides
// when to launch and what to do with the browser; this package only starts and reaps it.
package chromium

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/chromedp/chromedp"
)

// Allocator is one local launch's chromedp allocator with its profile directory.
type Allocator struct {
	Ctx    context.Context // chromedp's allocator context
	Swept  int             // stale profile directories removed before this launch's was made
	cancel context.CancelFunc
	prof   *ProfileDir
}

// NewAllocator prepares a launch of the browser at binaryPath with opts under ctx. Each
// launch has its own profile directory, locked while the browser lives, so that one left
// by a killed run (kill -9) is swept by the next launch (profiledir.go). now is the time
// of the call.
func NewAllocator(ctx context.Context, binaryPath string, now time.Time, opts ...chromedp.ExecAllocatorOption) (*Allocator, error) {
	if _, err := os.Stat(binaryPath); err != nil {
		return nil, fmt.Errorf("browser binary: %w", err)
	}
	prof, err := NewProfileDir("", now)
	if err != nil {
		return nil, fmt.Errorf("browser profile: %w", err)
	}
	a := &Allocator{Swept: prof.Swept(), prof: prof}
	a.Ctx, a.cancel = chromedp.NewExecAllocator(ctx, append(opts, chromedp.UserDataDir(prof.Path()))...)
	return a, nil
}

// Close ends the browser, returning once it has exited, then removes its profile
// directory.
func (a *Allocator) Close() error {
	a.cancel()
	return a.prof.Release()
}

// ProfilePath is the browser's user data directory (where it writes DevToolsActivePort
// when given a debugging port).
func (a *Allocator) ProfilePath() string { return a.prof.Path() }

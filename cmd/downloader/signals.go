package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// signalStop is the cause of a context a signal cancelled: the command then exits with
// 128 + the signal's number, as shells expect (130 for SIGINT, 143 for SIGTERM).
type signalStop struct{ sig os.Signal }

func (s *signalStop) Error() string { return s.sig.String() + " signal received" }

// notifyContext is signal.NotifyContext with a cause that names the signal. Later signals
// are swallowed until stop is called: the stop in progress (a polite drain, the export of
// the outputs) finishes.
func notifyContext(parent context.Context, sigs ...os.Signal) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			cancel(&signalStop{sig: s})
		case <-done:
		}
	}()
	return ctx, sync.OnceFunc(func() {
		signal.Stop(ch)
		close(done)
		cancel(context.Canceled)
	})
}

// interruptCode is the exit status of a command ctx stopped: 128 + the signal's number,
// 130 (SIGINT's) when it was cancelled otherwise.
func interruptCode(ctx context.Context) int {
	var s *signalStop
	if errors.As(context.Cause(ctx), &s) {
		if n, ok := s.sig.(syscall.Signal); ok {
			return 128 + int(n)
		}
	}
	return 130
}

package server

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"testing/synctest"
	"time"

	"downloader"
	"downloader/limiter"
)

// blockingFetcher holds every fetch until release is closed.
func blockingFetcher(entered chan<- struct{}, release <-chan struct{}) *fakeFetcher {
	f := &fakeFetcher{}
	f.fn = func(ctx context.Context, u *url.URL, adm *limiter.Admission) *downloader.Outcome {
		adm.Wire(f.clk.Now())
		entered <- struct{}{}
		<-release
		n := 5
		return &downloader.Outcome{HTTPStatus: 200, FinalURL: u.String(), RawTextLength: &n, Body: []byte("<p>hello</p>"), Text: "hello"}
	}
	return f
}

// TestDrain: while the service drains, /readyz is 503, new B requests get 503
// shutting_down with the 429's body, new C requests get 200 shutting_down not reached,
// bad input is still a 400, and the request in flight finishes before Drain returns.
func TestDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		h := newHarness(t, blockingFetcher(entered, release))
		h.srv.SetReady(true)
		type answer struct {
			code int
			m    map[string]any
		}
		inFlight := make(chan answer, 1)
		go func() {
			rec, m := h.do(t, http.MethodPost, "/v1/render", `{"url":"http://busy.test/","should_render":false}`)
			inFlight <- answer{rec.Code, m}
		}()
		<-entered

		drained := make(chan error, 1)
		go func() { drained <- h.srv.Drain(context.Background(), h.clk.Now().Add(20*time.Second)) }()
		synctest.Wait() // Drain is blocked waiting for the request in flight
		select {
		case err := <-drained:
			t.Fatalf("Drain returned %v with a request in flight", err)
		default:
		}
		if !h.srv.isDraining() {
			t.Fatal("Drain is waiting but the server is not draining")
		}

		rec, m := h.do(t, http.MethodGet, "/readyz", "")
		if rec.Code != http.StatusServiceUnavailable || m["status"] != "stopping" {
			t.Errorf("/readyz while draining: %d %v, want 503 stopping", rec.Code, m)
		}
		rec, m = h.do(t, http.MethodPost, "/v1/render", `{"url":"http://new.test/","should_render":false}`)
		if rec.Code != http.StatusServiceUnavailable || m["fail_reason"] != "shutting_down" || m["retry_after_seconds"] != 20.0 ||
			rec.Header().Get("Retry-After") != "20" {
			t.Errorf("B while draining: %d %v Retry-After %q, want 503 shutting_down, retry after 20 s", rec.Code, m, rec.Header().Get("Retry-After"))
		}
		rec, m = h.do(t, http.MethodPost, "/v1/probe", `{"url":"http://new.test/","should_render":false}`)
		if rec.Code != http.StatusOK || m["fail_reason"] != "shutting_down" || m["has_reached_origin"] != false ||
			m["http_status"] != nil || m["domain"] != "new.test" {
			t.Errorf("C while draining: %d %v, want 200 shutting_down, not reached", rec.Code, m)
		}
		if rec, m := h.do(t, http.MethodPost, "/v1/probe", `{"url":"ftp://new.test/"}`); rec.Code != http.StatusBadRequest || m["field"] != "url" {
			t.Errorf("bad input while draining: %d %v, want 400 naming url", rec.Code, m)
		}
		if _, ok := h.lim.Domain(h.clk.Now(), "new.test"); ok {
			t.Error("a request refused while draining reached the limiter")
		}
		select {
		case err := <-drained:
			t.Fatalf("Drain returned %v with a request in flight", err)
		default:
		}

		close(release)
		if a := <-inFlight; a.code != http.StatusOK || a.m["fail_reason"] != nil || a.m["has_reached_origin"] != true {
			t.Errorf("the request in flight: %d %v, want it finished normally", a.code, a.m)
		}
		if err := <-drained; err != nil {
			t.Errorf("Drain = %v after the last request finished", err)
		}
	})
}

// TestDrainGraceOver: Drain gives up when its context ends, and returns at once when
// nothing is in flight.
func TestDrainGraceOver(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := newHarness(t, blockingFetcher(entered, release))
	done := make(chan struct{})
	go func() {
		h.do(t, http.MethodPost, "/v1/probe", `{"url":"http://busy.test/"}`)
		close(done)
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.srv.Drain(ctx, h.clk.Now()); !errors.Is(err, context.Canceled) {
		t.Errorf("Drain = %v, want the context's error", err)
	}
	close(release)
	<-done

	idle := newHarness(t, &fakeFetcher{})
	if err := idle.srv.Drain(context.Background(), time.Time{}); err != nil {
		t.Errorf("Drain with nothing in flight = %v", err)
	}
	rec, m := idle.do(t, http.MethodPost, "/v1/render", `{"url":"http://x.test/"}`)
	if rec.Code != http.StatusServiceUnavailable || m["retry_after_seconds"] != 1.0 {
		t.Errorf("B after Drain with no grace end: %d %v, want 503 retry after 1 s", rec.Code, m)
	}
}

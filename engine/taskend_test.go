package engine

import (
	"context"
	"testing"

	"downloader"
)

// runAndStore runs task t through entry A and writes what it returned to the engine's
// stores, as the lease loop does with stores outside its own database
// (lease.Config.Pages, Results): the engine itself writes nothing of a task.
func runAndStore(tb testing.TB, ctx context.Context, e *Engine, t *downloader.Task) downloader.LeaseReply {
	tb.Helper()
	out := e.RunTask(ctx, t)
	if out.Report == nil {
		return out
	}
	end := out.End()
	if end.Page != nil {
		key, err := e.cfg.Pages.PutPage(ctx, end.Page)
		if err != nil {
			tb.Errorf("put page of %s: %v", t.URL, err)
			return out
		}
		end.SetPageKey(key)
	}
	if end.Result != nil {
		if err := e.cfg.Results.PutFetchResult(ctx, end.Result); err != nil {
			tb.Errorf("put fetch_result of %s: %v", t.URL, err)
		}
	}
	return out
}

// TestRunTaskWritesNothing: entry A returns the page and the fetch_result with the report,
// unwritten, for the lease loop to commit in one write (downloader.TaskEnd).
func TestRunTaskWritesNothing(t *testing.T) {
	e, _, _, res := newTestEngine(t)
	out := e.RunTask(t.Context(), &downloader.Task{TaskID: "t1", URL: "http://a.test/", MinIntervalMs: ms(0), ShouldStore: true})
	if out.Report == nil || out.Result == nil || out.Result.TaskID != "t1" || out.Result.URL != "http://a.test/" {
		t.Fatalf("reply = %+v, want a report and its fetch_result", out)
	}
	res.mu.Lock()
	n := len(res.rs)
	res.mu.Unlock()
	if n != 0 {
		t.Errorf("%d fetch results written by RunTask, want none", n)
	}
}

package render

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
)

// TestRenderHeapRecycling: with IsolationWipe, a long-lived tab whose render leaves its
// renderer's JavaScript heap above MaxContextHeapBytes is recycled (a bound of one byte:
// after every render), and one under it is not; a recycle leaves no tab or context behind
// in the browser, and closing the pool leaves no process, tab or temporary directory
// (TestMain checks).
func TestRenderHeapRecycling(t *testing.T) {
	t.Parallel() // owns its origin and pool (parallelTests)
	tests := []struct {
		name        string
		bound       int64
		wantRecycle bool
	}{
		{"over the bound", 1, true},
		{"no bound", -1, false},
	}
	f := getFixture(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newSiteOrigin(t, stateHandlers())
			p := o.poolOwnBrowser(t, Config{Isolation: IsolationWipe, Concurrency: 1, MaxContextHeapBytes: tt.bound}) // counts the browser's contexts
			const renders = 6
			for i := range renders {
				// One site: a tab kept would be reused for each.
				out := p.Render(context.Background(), f.url(siteName(1)+"/"), nil, safetyTimeout(t))
				if out.FailReason != "" || !strings.Contains(out.Text, "CLEAN") {
					t.Fatalf("render %d: fail_reason=%s text %q", i, failReason(out), out.Text)
				}
			}
			st := p.Stats()
			if tt.wantRecycle {
				// Each render but the last gave its tab back before the next took one.
				if st.HeapRecycledContextCount < renders-1 || st.RecycledContextCount < renders-1 {
					t.Errorf("heap_recycled_context_count=%d recycled_context_count=%d after %d renders over the bound, want >= %d",
						st.HeapRecycledContextCount, st.RecycledContextCount, renders, renders-1)
				}
			} else if st.HeapRecycledContextCount != 0 || st.RecycledContextCount != 0 {
				t.Errorf("heap_recycled_context_count=%d recycled_context_count=%d without a bound, want 0", st.HeapRecycledContextCount, st.RecycledContextCount)
			}
			ctx, cancel := context.WithTimeout(context.Background(), safetyTimeout(t))
			defer cancel()
			b, err := p.browserFor(ctx)
			if err != nil {
				t.Fatal(err)
			}
			res, err := cdp.Call(ctx, b.b, target.GetBrowserContexts, cdp.Empty{})
			if err != nil {
				t.Fatal(err)
			}
			// The slot's tab's context and, while the last recycled one closes behind
			// Render, its replacement's.
			if n := len(res.BrowserContextIDs); n > 2 {
				t.Errorf("the browser has %d contexts after %d renders (the pool counts %d), want at most 2", n, renders, st.ContextCount)
			}
			targets, err := cdp.Call(ctx, b.b, target.GetTargets, target.GetTargetsParams{})
			if err != nil {
				t.Fatal(err)
			}
			pages := 0
			for _, ti := range targets.TargetInfos {
				if ti.Type == "page" && slices.Contains(res.BrowserContextIDs, ti.BrowserContextID) {
					pages++
				}
			}
			if pages > 2 {
				t.Errorf("%d tabs in the pool's contexts, want at most 2", pages)
			}
			p.Close()
			if st := p.Stats(); st.ContextCount != 0 {
				t.Errorf("context_count=%d after Close, want 0", st.ContextCount)
			}
		})
	}
}

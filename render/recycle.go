package render

import (
	"context"

	"github.com/chromedp/cdproto/cdp"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// DefaultMaxContextHeapBytes is the JavaScript heap past which a long-lived tab is
// recycled after its render (Config.MaxContextHeapBytes). A TodoMVC app's heap is a few
// MB; a page that leaves 128 MB behind makes the tab's renderer worth replacing rather
// than wiping, whatever its render count.
const DefaultMaxContextHeapBytes = 128 << 20

// isHeapOver reports whether the long-lived tab t, its render just read, leaves a
// JavaScript heap above Config.MaxContextHeapBytes (used size of its renderer's isolate,
// Runtime.getHeapUsage), and counts it. The heap is what the renderer process grows by
// render after render on one site (its process is reused); the browser's in-memory HTTP
// cache is bounded by MaxContextRenders instead, since no cheap measurement reaches it.
// An endpoint that does not answer (an older browser, a remote one without the method)
// keeps the tab: the render count still bounds it.
func (p *Pool) isHeapOver(t *tab) bool {
	if p.cfg.MaxContextHeapBytes < 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(t.ctx, closeTimeout)
	defer cancel()
	h, err := chromedp.Call(ctx, cdpruntime.GetHeapUsage, cdp.Empty{})
	if err != nil || h.UsedSize <= float64(p.cfg.MaxContextHeapBytes) {
		return false
	}
	p.mu.Lock()
	p.heapRecycled++
	p.mu.Unlock()
	return true
}

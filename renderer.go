package downloader

// RendererStats is a snapshot of the renderer pool (render.Pool.Stats) as the console and
// the metrics show it; they read it through a func, without importing the renderer.
type RendererStats struct {
	SlotCount int `json:"slot_count"` // renders at once: the operator's cap (--render-concurrency)
	// EffectiveSlotCount is how many of them renders may take now (--render-scaling):
	// SlotCount when fixed, the controller's count when adaptive.
	EffectiveSlotCount int    `json:"effective_slot_count"`
	IsAdaptive         bool   `json:"is_adaptive"`
	BusyCount          int    `json:"busy_count"`
	QueuedCount        int    `json:"queued_count"`
	WarmTabCount       int    `json:"warm_tab_count"`
	RestartCount       int    `json:"restart_count"`
	IsBrowserUp        bool   `json:"is_browser_up"`
	IsRemote           bool   `json:"is_remote"`
	LastError          string `json:"last_error"`
	RenderedCount      int64  `json:"rendered_count"`
	// ContextCount is the long-lived browser contexts alive (render.IsolationWipe);
	// RecycledContextCount how many were disposed of so far.
	ContextCount         int   `json:"context_count"`
	RecycledContextCount int64 `json:"recycled_context_count"`
	// HeapRecycledContextCount is how many of those went for their heap
	// (render.Config.MaxContextHeapBytes).
	HeapRecycledContextCount int64 `json:"heap_recycled_context_count"`
	// RendererKind is the kind of the CDP server connected to last (chromium, obscura),
	// given or detected at connect time; empty before the first connection.
	RendererKind string `json:"renderer_kind"`
	// IsGuardRefused: the endpoint is refused while the connect-time canary's requests do
	// not reach our guard; renders answer renderer_unavailable.
	IsGuardRefused bool `json:"is_guard_refused"`
	// GuardProxyAddr is where the guard proxy of a remote endpoint listens.
	GuardProxyAddr string `json:"guard_proxy_addr,omitempty"`
}

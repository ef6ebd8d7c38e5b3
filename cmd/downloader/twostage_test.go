package main

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"downloader/origintest"
)

// TestTwoStageRecovery is the probe sequence a scheduler runs when a paused domain may have
// recovered (seed 002): a cheap probe (should_render=false) while the gateway answers 502,
// the same probe once it answers 200, then a render probe that confirms the content is
// really there (not an empty shell). Real service, real fetcher, real headless Chromium.
func TestTwoStageRecovery(t *testing.T) {
	var isUp atomic.Bool
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isUp.Load() {
			http.Error(w, "bad gateway: origin unreachable", http.StatusBadGateway)
			return
		}
		switch r.URL.Path {
		case "/api/article":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"body":"The article arrives by XHR after the page loads, long enough to count."}`)
		default:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, `<!doctype html><html><body><div id="app">Loading</div><script>
fetch('/api/article').then(r => r.json()).then(a => { document.getElementById('app').textContent = a.body; });
</script></body></html>`)
		}
	}))
	defer origin.Close()
	s := startTestService(t, "--connect-to", origin.ConnectTo(), "--render-concurrency", "1")
	probe := func(shouldRender bool) map[string]any {
		t.Helper()
		_, m := s.post(t, "/v1/probe", fmt.Sprintf(`{"url":"http://m.example.hk/","min_interval_ms":0,"should_render":%v}`, shouldRender))
		return m
	}

	// Stage 0: the gateway is up, the origin behind it is not.
	m := probe(false)
	if m["http_status"] != float64(502) || m["fail_reason"] != "http_status_error" || m["has_reached_origin"] != true {
		t.Fatalf("cheap probe while down: %v", m)
	}
	if m["text_length"] != nil {
		t.Errorf("cheap probe text_length = %v, want null", m["text_length"])
	}
	// Stage 1: the cheap probe sees 200.
	isUp.Store(true)
	m = probe(false)
	if m["http_status"] != float64(200) || m["fail_reason"] != nil || m["has_reached_origin"] != true {
		t.Fatalf("cheap probe after recovery: %v", m)
	}
	raw, _ := m["raw_text_length"].(float64)
	// Stage 2: the render probe confirms the content.
	m = probe(true)
	if m["http_status"] != float64(200) || m["fail_reason"] != nil || m["has_reached_origin"] != true {
		t.Fatalf("render probe: %v", m)
	}
	text, _ := m["text_length"].(float64)
	if text <= raw {
		t.Errorf("render probe text_length %v, want more than the raw %v: the XHR content", text, raw)
	}
	hs, _ := m["health_signal"].(map[string]any)
	if n, _ := hs["xhr_count"].(float64); n < 1 {
		t.Errorf("health_signal.xhr_count = %v, want ≥ 1", hs["xhr_count"])
	}
	// A probe is lean: no page content in the answer.
	for _, k := range []string{"html", "text", "final_url", "page_key"} {
		if _, ok := m[k]; ok {
			t.Errorf("probe answer carries %q", k)
		}
	}
}

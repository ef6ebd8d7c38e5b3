package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"downloader/origintest"
)

// TestRenderTodoMVCEntryB: real framework apps (the npm package todomvc, which
// scripts/setup-test.sh unpacks) render their own DOM through POST /v1/render: the answer's
// text is the app's visible text, and its HTML the DOM the framework built.
func TestRenderTodoMVCEntryB(t *testing.T) {
	t.Parallel() // owns its service, origin and data dir (longTests in main_test.go)
	dir := filepath.Join("..", "..", ".cache", "todomvc", "package")
	if _, err := os.Stat(filepath.Join(dir, "examples", "react", "index.html")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the npm package todomvc is not at %s (scripts/setup-test.sh fetches it): %v", dir, err)
		}
		t.Skipf("the npm package todomvc is not at %s (run scripts/setup-test.sh): %v", dir, err)
	}
	origin := origintest.New(http.FileServer(http.Dir(dir)))
	defer origin.Close()
	s := startTestService(t, "--connect-to", origin.ConnectTo(), "--render-concurrency", "1")
	for i, app := range []string{"react", "vue", "angularjs", "backbone", "emberjs", "knockoutjs", "mithril", "vanillajs"} {
		_, m := s.post(t, "/v1/render", fmt.Sprintf(`{"url":"http://t%d.todo.example/examples/%s/index.html","min_interval_ms":0}`, i, app))
		text, _ := m["text"].(string)
		html, _ := m["html"].(string)
		n, _ := m["text_length"].(float64)
		raw, _ := m["raw_text_length"].(float64)
		if m["fail_reason"] != nil || m["http_status"] != float64(200) {
			t.Errorf("%s: fail_reason=%v http_status=%v", app, m["fail_reason"], m["http_status"])
			continue
		}
		// The app's input exists in every framework's own markup once it has rendered.
		if !strings.Contains(text, "todos") || n <= raw || !strings.Contains(html, "new-todo") {
			t.Errorf("%s: text_length=%v raw_text_length=%v text %.80q: want the app's own rendering", app, n, raw, text)
		}
		hs, _ := m["health_signal"].(map[string]any)
		if k, _ := hs["skipped_request_count"].(float64); k < 1 {
			t.Errorf("%s: skipped_request_count=%v, want the background image skipped", app, hs["skipped_request_count"])
		}
	}
}

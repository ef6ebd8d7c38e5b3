package server

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"downloader"
)

// TestWriteRenderAnswer: entry B's answer written a chunk at a time is the JSON writeJSON
// writes of it, whatever the content: NULs, invalid UTF-8, characters across a chunk's
// edge, HTML and JSON's own specials, U+2028.
func TestWriteRenderAnswer(t *testing.T) {
	status := 200
	edge := strings.Repeat("a", answerChunkBytes-1) + "é" + strings.Repeat("中", answerChunkBytes)
	for _, tt := range []struct{ name, html, text string }{
		{"empty", "", ""},
		{"plain", "<p>a & b</p>", "a & b"},
		{"specials", "\"quoted\" \\ back\nline\ttab\r\u2028\u2029", "<>&"},
		{"NULs", strings.Repeat("\x00", 3*answerChunkBytes+5), "\x00"},
		{"invalid UTF-8", "a\xffb\xc3" + strings.Repeat("\xe4\xb8", answerChunkBytes), "\xed\xa0\x80"},
		{"characters across the chunk edge", edge, edge[1:]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := renderResponse{Summary: downloader.Summary{Domain: "a.test", HTTPStatus: &status, HasReachedOrigin: true},
				FinalURL: "http://a.test/", HTML: tt.html, Text: tt.text, PageKey: "k1"}
			want := httptest.NewRecorder()
			writeJSON(want, 200, a)
			got := httptest.NewRecorder()
			writeRenderAnswer(got, a)
			if got.Code != 200 || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
				t.Errorf("status %d content type %q", got.Code, got.Header().Get("Content-Type"))
			}
			var gm, wm map[string]any
			if err := json.Unmarshal(got.Body.Bytes(), &gm); err != nil {
				t.Fatalf("not JSON: %v: %.200q", err, got.Body.String())
			}
			json.Unmarshal(want.Body.Bytes(), &wm)
			if !reflect.DeepEqual(gm, wm) {
				t.Errorf("answer differs from writeJSON's")
			}
			if got.Body.Len() != want.Body.Len() || !bytes.HasSuffix(got.Body.Bytes(), []byte("}\n")) {
				t.Errorf("%d bytes, writeJSON's %d", got.Body.Len(), want.Body.Len())
			}
		})
	}
}

package httpjson

import (
	"testing"

	"downloader"
)

type decodeTask struct {
	URL          string `json:"url"`
	ShouldRender bool   `json:"should_render"`
	Count        *int64 `json:"min_interval_ms"`
}

// TestUnmarshalIsStrict: exact member names (SPEC §7), no unknown or duplicate members,
// no trailing data; each error names its field.
func TestUnmarshalIsStrict(t *testing.T) {
	for _, tt := range []struct {
		name, body, field string
	}{
		{"ok", `{"url":"http://a.test/","should_render":true,"min_interval_ms":5}`, ""},
		{"upper case name", `{"URL":"http://a.test/"}`, "URL"},
		{"mixed case name", `{"Should_Render":true}`, "Should_Render"},
		{"unknown field", `{"render":true}`, "render"},
		{"wrong type", `{"should_render":"yes"}`, "should_render"},
		{"duplicate", `{"url":"http://a.test/","url":"http://b.test/"}`, "url"},
		{"trailing data", `{"url":"http://a.test/"} {}`, "body"},
		{"not an object", `[1]`, "body"},
		{"empty", ` `, "body"},
		{"truncated", `{"url":`, "body"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var v decodeTask
			err := Unmarshal([]byte(tt.body), &v)
			if got := downloader.ErrorField(err); got != tt.field {
				t.Fatalf("field %q, want %q (err %v)", got, tt.field, err)
			}
			if err != nil && downloader.ErrorCode(err) != downloader.EINVALID {
				t.Errorf("code %s, want EINVALID", downloader.ErrorCode(err))
			}
		})
	}
	var b struct {
		Tasks []decodeTask `json:"tasks"`
	}
	if err := Unmarshal([]byte(`{"tasks":[{"url":"x"},{"url":"y","min_interval_ms":"5"}]}`), &b); downloader.ErrorField(err) != "tasks[1].min_interval_ms" {
		t.Errorf("nested: field %q (%v), want tasks[1].min_interval_ms", downloader.ErrorField(err), err)
	}
}

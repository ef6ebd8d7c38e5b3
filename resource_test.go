package downloader

import (
	"slices"
	"testing"
)

func TestParseResourceTypes(t *testing.T) {
	tests := []struct {
		in      []string
		want    []ResourceType
		isValid bool
	}{
		{nil, []ResourceType{}, true},
		{[]string{}, []ResourceType{}, true},
		{[]string{"image", "media", "font"}, []ResourceType{"image", "media", "font"}, true},
		{[]string{"font", "font", "text_track"}, []ResourceType{"font", "text_track"}, true},
		{[]string{"document"}, nil, false},
		{[]string{"Image"}, nil, false},
		{[]string{"websocket"}, nil, false},
		{[]string{""}, nil, false},
	}
	for _, tt := range tests {
		got, err := ParseResourceTypes("skip_resource_types", tt.in)
		if (err == nil) != tt.isValid {
			t.Errorf("ParseResourceTypes(%q) error %v, want valid=%v", tt.in, err, tt.isValid)
			continue
		}
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Field != "skip_resource_types" || e.Code != EINVALID {
				t.Errorf("ParseResourceTypes(%q) error %#v, want EINVALID naming the field", tt.in, err)
			}
			continue
		}
		if got == nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseResourceTypes(%q) = %#v, want %#v (never nil)", tt.in, got, tt.want)
		}
	}
	for _, r := range DefaultSkipResourceTypes() {
		if !slices.Contains(ResourceTypes, r) {
			t.Errorf("default %q is not in the closed set", r)
		}
	}
}

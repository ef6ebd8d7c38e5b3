package render

import (
	"errors"
	"testing"

	"downloader"
	"downloader/netguard"
)

// TestSpareTabCountInvalid: a negative spare tab count is refused, naming its field.
func TestSpareTabCountInvalid(t *testing.T) {
	_, err := New(Config{Guard: netguard.New(netguard.Config{}), SpareTabCount: -1})
	var e *downloader.Error
	if !errors.As(err, &e) || e.Field != "render_spare_tab_count" {
		t.Fatalf("New with SpareTabCount -1: %v, want an invalid render_spare_tab_count", err)
	}
}

package downloader

import "testing"

// TestFailReasonLabels: the console shows every reason of the closed set in both
// languages (SPEC §4: "the console shows a readable label for each").
func TestFailReasonLabels(t *testing.T) {
	for _, r := range FailReasons() {
		if r.Label() == string(r) || r.Label() == "" {
			t.Errorf("%s has no Chinese label", r)
		}
		if r.EnglishLabel() == string(r) || r.EnglishLabel() == "" {
			t.Errorf("%s has no English label", r)
		}
	}
	if got := FailReason("made_up").EnglishLabel(); got != "made_up" {
		t.Errorf("an unknown reason reads %q, want its code", got)
	}
}

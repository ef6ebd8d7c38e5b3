package downloader

import "testing"

func TestValidateTarget(t *testing.T) {
	ms := func(n int64) *int64 { return &n }
	tests := []struct {
		name     string
		url      string
		domain   string
		interval *int64
		host     string
		field    string
	}{
		{"ok", "http://A.test/x", "", nil, "a.test", ""},
		{"domain matches", "http://a.test/", "A.test.:80", ms(0), "a.test", ""},
		{"one hour", "http://a.test/", "", ms(3_600_000), "a.test", ""},
		{"no url", "", "", nil, "", "url"},
		{"ftp", "ftp://a.test/", "", nil, "", "url"},
		{"domain not host", "http://a.test/", "b.test", nil, "", "domain"},
		{"domain invalid", "http://a.test/", "[::1", nil, "", "domain"},
		{"negative interval", "http://a.test/", "", ms(-1), "", "min_interval_ms"},
		{"interval above one hour", "http://a.test/", "", ms(3_600_001), "", "min_interval_ms"},
		{"url checked before domain", "nope", "b.test", ms(-1), "", "url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, host, err := ValidateTarget(tt.url, tt.domain, tt.interval)
			if got := ErrorField(err); got != tt.field {
				t.Fatalf("field = %q, want %q (err %v)", got, tt.field, err)
			}
			if err != nil && ErrorCode(err) != EINVALID {
				t.Errorf("code = %q, want %q", ErrorCode(err), EINVALID)
			}
			if host != tt.host {
				t.Errorf("host = %q, want %q", host, tt.host)
			}
		})
	}
}

func TestValidateLeasedTask(t *testing.T) {
	ms := func(n int64) *int64 { return &n }
	tests := []struct {
		name  string
		task  Task
		field string
	}{
		{"ok", Task{URL: "http://a.test/x", Domain: "A.test", MinIntervalMs: ms(100)}, ""},
		{"interval required", Task{URL: "http://a.test/"}, "min_interval_ms"},
		{"domain not host", Task{URL: "http://a.test/", Domain: "b.test", MinIntervalMs: ms(1)}, "domain"},
		{"headers", Task{URL: "http://a.test/", MinIntervalMs: ms(1), RequestHeaders: RequestHeaders{"accept-language": "zh-TW"}}, ""},
		{"header refused", Task{URL: "http://a.test/", MinIntervalMs: ms(1), RequestHeaders: RequestHeaders{"Host": "b.test"}}, "request_headers.Host"},
		{"user agent not allowed", Task{URL: "http://a.test/", MinIntervalMs: ms(1), RequestHeaders: RequestHeaders{"User-Agent": "x"}}, "request_headers.User-Agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, req, err := ValidateLeasedTask(&tt.task, HeaderPolicy{})
			if got := ErrorField(err); got != tt.field {
				t.Fatalf("field = %q, want %q (err %v)", got, tt.field, err)
			}
			if err == nil && (req.Entry != EntryLease || req.IntervalSource != IntervalSourceLease || req.Domain != "a.test") {
				t.Errorf("request = %+v", req)
			}
		})
	}
}

func TestCheckTaskID(t *testing.T) {
	long := make([]byte, MaxTaskIDBytes+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, tt := range []struct {
		id   string
		isOK bool
	}{{"", true}, {"t-1", true}, {string(long[:MaxTaskIDBytes]), true}, {string(long), false}, {"a b", false}, {"a\x7f", false}} {
		if err := CheckTaskID(tt.id); (err == nil) != tt.isOK {
			t.Errorf("CheckTaskID(%q) = %v, want ok %v", tt.id, err, tt.isOK)
		}
	}
}

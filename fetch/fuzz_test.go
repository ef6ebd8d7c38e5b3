package fetch

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseRetryAfter: any Retry-After an origin sends gives nil or a whole number of
// seconds that is never negative; delay-seconds come back as sent, and an HTTP-date as
// the seconds from now to it, rounded up.
func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC)
	for _, s := range []string{
		"120", "0", "-1", " 5 ", "+5", "1.5", "9223372036854775807", "9223372036854775808", "1e3", "",
		"Sat, 15 Aug 2026 07:01:30 GMT", "Saturday, 15-Aug-26 07:01:30 GMT", "Sat Aug 15 07:01:30 2026",
		"Thu, 01 Jan 1970 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "Sat, 15 Aug 2026 07:01:30 PST",
		"tomorrow", "\x00", "120, 60",
	} {
		f.Add(s, int64(0))
	}
	f.Fuzz(func(t *testing.T, v string, offsetSeconds int64) {
		at := now.Add(time.Duration(offsetSeconds%(1<<33)) * time.Second)
		got := parseRetryAfter(v, at)
		if got == nil {
			return
		}
		if *got < 0 {
			t.Fatalf("parseRetryAfter(%q) = %d: negative", v, *got)
		}
		s := strings.TrimSpace(v)
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			if n != *got {
				t.Fatalf("parseRetryAfter(%q) = %d, want %d", v, *got, n)
			}
			return
		}
		date, err := http.ParseTime(s)
		if err != nil {
			t.Fatalf("parseRetryAfter(%q) = %d for neither a number nor an HTTP-date", v, *got)
		}
		d := date.Sub(at)
		if d <= 0 {
			if *got != 0 {
				t.Fatalf("parseRetryAfter(%q) = %d for a date in the past", v, *got)
			}
			return
		}
		want := int64(d / time.Second)
		if d%time.Second != 0 {
			want++
		}
		if *got != want {
			t.Fatalf("parseRetryAfter(%q) = %d for a date %v away: want %d, rounded up", v, *got, d, want)
		}
	})
}

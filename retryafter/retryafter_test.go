package retryafter

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"downloader"
)

func TestSeconds(t *testing.T) {
	now := time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC)
	half := now.Add(500 * time.Millisecond) // a now between two whole seconds
	tests := []struct {
		name string
		in   string
		now  time.Time
		want *int64
	}{
		{"seconds", "120", now, new(int64(120))},
		{"zero", "0", now, new(int64(0))},
		{"spaces around", " 5 ", now, new(int64(5))},
		{"plus sign", "+5", now, new(int64(5))},
		{"negative", "-1", now, nil},
		{"the longest wait", "3600", now, new(MaxWaitSeconds)},
		{"one second past the longest wait", "3601", now, new(MaxWaitSeconds)},
		{"a day", "86400", now, new(MaxWaitSeconds)},
		{"past a Duration in seconds", "18446744074", now, new(MaxWaitSeconds)},
		{"largest int64", "9223372036854775807", now, new(MaxWaitSeconds)},
		{"20 digits, past int64", "18446744073709551616", now, new(MaxWaitSeconds)},
		{"20 nines", strings.Repeat("9", 20), now, new(MaxWaitSeconds)},
		{"very huge saturates", strings.Repeat("9", 400), now, new(MaxWaitSeconds)},
		{"leading zeros", "00000000000000000000000000001", now, new(int64(1))},
		{"negative 20 digits", "-18446744073709551616", now, nil},
		{"minus zero", "-0", now, new(int64(0))},
		{"junk after digits", "120s", now, nil},
		{"hex", "0x78", now, nil},
		{"fraction", "1.5", now, nil},
		{"exponent", "1e3", now, nil},
		{"list", "120, 60", now, nil},
		{"empty", "", now, nil},
		{"blank", "   ", now, nil},
		{"word", "tomorrow", now, nil},
		{"NUL", "\x00", now, nil},
		{"IMF-fixdate", "Sat, 15 Aug 2026 07:01:30 GMT", now, new(int64(90))},
		{"RFC 850 date", "Saturday, 15-Aug-26 07:01:30 GMT", now, new(int64(90))},
		{"asctime date", "Sat Aug 15 07:01:30 2026", now, new(int64(90))},
		{"date rounds up, never down", "Sat, 15 Aug 2026 07:01:30 GMT", half, new(int64(90))},
		{"date one second ahead of a fractional now", "Sat, 15 Aug 2026 07:00:01 GMT", half, new(int64(1))},
		{"date now", "Sat, 15 Aug 2026 07:00:00 GMT", now, new(int64(0))},
		{"date just passed", "Sat, 15 Aug 2026 07:00:00 GMT", half, new(int64(0))},
		{"date in the past", "Thu, 01 Jan 1970 00:00:00 GMT", now, new(int64(0))},
		{"date an hour ahead", "Sat, 15 Aug 2026 08:00:00 GMT", now, new(MaxWaitSeconds)},
		{"date past the longest wait", "Sat, 15 Aug 2026 08:00:01 GMT", now, new(MaxWaitSeconds)},
		{"date next year", "Sun, 15 Aug 2027 07:00:00 GMT", now, new(MaxWaitSeconds)},
		{"date centuries away", "Fri, 31 Dec 9999 23:59:59 GMT", now, new(MaxWaitSeconds)},
		{"date centuries ago", "Mon, 01 Jan 0001 00:00:00 GMT", now, new(int64(0))},
		{"date in another zone", "Sat, 15 Aug 2026 07:01:30 PST", now, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Seconds(tt.in, tt.now)
			switch {
			case got == nil && tt.want == nil:
			case got == nil || tt.want == nil || *got != *tt.want:
				t.Errorf("Seconds(%q) = %s, want %s", tt.in, show(got), show(tt.want))
			}
		})
	}
}

func show(p *int64) string {
	if p == nil {
		return "nil"
	}
	return strconv.FormatInt(*p, 10)
}

// FuzzSeconds: any Retry-After an origin sends gives nil or a whole number of seconds
// in [0, MaxWaitSeconds]; delay-seconds come back as sent (saturated at MaxWaitSeconds),
// and an HTTP-date as the seconds from now to it, rounded up, never before the date
// unless capped.
func FuzzSeconds(f *testing.F) {
	now := time.Date(2026, 8, 15, 7, 0, 0, 0, time.UTC)
	for _, s := range []string{
		"120", "0", "-1", " 5 ", "+5", "1.5", "9223372036854775807", "9223372036854775808", "1e3", "",
		"Sat, 15 Aug 2026 07:01:30 GMT", "Saturday, 15-Aug-26 07:01:30 GMT", "Sat Aug 15 07:01:30 2026",
		"Thu, 01 Jan 1970 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "Sat, 15 Aug 2026 07:01:30 PST",
		"tomorrow", "\x00", "120, 60", "-0", "00000000000000000000000000001",
	} {
		f.Add(s, int64(0), int64(0))
	}
	f.Fuzz(func(t *testing.T, v string, offsetSeconds, offsetNanos int64) {
		at := now.Add(time.Duration(offsetSeconds%(1<<33))*time.Second + time.Duration(offsetNanos%int64(time.Second)))
		got := Seconds(v, at)
		s := strings.TrimSpace(v)
		if got == nil {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
				t.Fatalf("Seconds(%q) = nil for delay-seconds %d", v, n)
			}
			if _, err := http.ParseTime(s); err == nil {
				if _, err := strconv.ParseInt(s, 10, 64); err != nil {
					t.Fatalf("Seconds(%q) = nil for an HTTP-date", v)
				}
			}
			return
		}
		if *got < 0 || *got > MaxWaitSeconds {
			t.Fatalf("Seconds(%q) = %d: outside [0, %d]", v, *got, MaxWaitSeconds)
		}
		if d := Duration(*got); d < 0 || d > MaxWait || d != time.Duration(*got)*time.Second {
			t.Fatalf("Duration(%d) = %v", *got, d)
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			if min(n, MaxWaitSeconds) != *got {
				t.Fatalf("Seconds(%q) = %d, want %d", v, *got, min(n, MaxWaitSeconds))
			}
			return
		}
		if isDigits(s) {
			if *got != MaxWaitSeconds {
				t.Fatalf("Seconds(%q) = %d, want saturation", v, *got)
			}
			return
		}
		date, err := http.ParseTime(s)
		if err != nil {
			t.Fatalf("Seconds(%q) = %d for neither a number nor an HTTP-date", v, *got)
		}
		// In Unix seconds: a date centuries away is past what a time.Duration holds.
		back := time.Unix(at.Unix()+*got, int64(at.Nanosecond()))
		if *got == MaxWaitSeconds && back.Before(date) {
			return // capped: the date is further than the longest wait honoured
		}
		if *got > 0 && back.Before(date) {
			t.Fatalf("Seconds(%q) = %d at %v: back at %v, before the date %v", v, *got, at, back, date)
		}
		if *got > 0 && !back.Add(-time.Second).Before(date) {
			t.Fatalf("Seconds(%q) = %d at %v: a whole second later than the date %v", v, *got, at, date)
		}
		if *got == 0 && date.After(at) {
			t.Fatalf("Seconds(%q) = 0 at %v for a date ahead, %v", v, at, date)
		}
	})
}

// TestDuration: a count of seconds becomes a wait in [0, MaxWait], never a wrapped one.
func TestDuration(t *testing.T) {
	tests := []struct {
		secs int64
		want time.Duration
	}{
		{math.MinInt64, 0},
		{-1, 0},
		{0, 0},
		{1, time.Second},
		{MaxWaitSeconds - 1, MaxWait - time.Second},
		{MaxWaitSeconds, MaxWait},
		{MaxWaitSeconds + 1, MaxWait},
		{18446744074, MaxWait}, // times time.Second wraps int64
		{math.MaxInt64 / int64(time.Second), MaxWait},
		{math.MaxInt64/int64(time.Second) + 1, MaxWait},
		{math.MaxInt64, MaxWait},
	}
	for _, tt := range tests {
		if got := Duration(tt.secs); got != tt.want {
			t.Errorf("Duration(%d) = %v, want %v", tt.secs, got, tt.want)
		}
	}
	if MaxWait != downloader.MaxMinInterval {
		t.Errorf("MaxWait = %v, want the largest min_interval_ms, %v", MaxWait, downloader.MaxMinInterval)
	}
}

package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestZZProfileBomb(t *testing.T) {
	cases := bodyMemCases(t)[:1]
	o := memOrigin(t, cases)
	s := startTestService(t, "--connect-to", "::"+strings.TrimPrefix(o.URL, "http://"), "--renderer-endpoint", "ws://127.0.0.1:1/devtools/browser", "--log-level", "error")
	start := time.Now()
	resp, err := http.Post(s.base+"/v1/render", "application/json", strings.NewReader(`{"url":"http://a.test/0","should_render":false,"min_interval_ms":0}`))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t.Logf("status %d, %d bytes in %v", resp.StatusCode, n, time.Since(start))
}

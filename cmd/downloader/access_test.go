package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestListenPolicy is the access rule: without both tokens the service listens on loopback
// only, unless the operator passes --allow-unauthenticated.
func TestListenPolicy(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{"loopback without tokens", []string{"--listen", "127.0.0.1:8080"}, nil, ""},
		{"loopback elsewhere in 127/8", []string{"--listen", "127.0.0.2:8080"}, nil, ""},
		{"IPv6 loopback", []string{"--listen", "[::1]:8080"}, nil, ""},
		{"localhost", []string{"--listen", "localhost:8080"}, nil, ""},
		{"every interface without tokens", []string{"--listen", ":8080"}, nil, "--api-token and --admin-token"},
		{"0.0.0.0 without tokens", []string{"--listen", "0.0.0.0:8080"}, nil, "--api-token and --admin-token"},
		{"a LAN address without tokens", []string{"--listen", "10.1.2.3:8080"}, nil, "not a loopback address"},
		{"a host name without tokens", []string{"--listen", "downloader.internal:8080"}, nil, "not a loopback address"},
		{"only the API token", []string{"--listen", ":8080", "--api-token", "a"}, nil, "without --admin-token anyone"},
		{"only the admin token", []string{"--listen", ":8080", "--admin-token", "b"}, nil, "without --api-token anyone"},
		{"both tokens", []string{"--listen", ":8080", "--api-token", "a", "--admin-token", "b"}, nil, ""},
		{"both tokens from the environment", []string{"--listen", ":8080"},
			map[string]string{"DOWNLOADER_API_TOKEN": "a", "DOWNLOADER_ADMIN_TOKEN": "b"}, ""},
		{"the operator allows it", []string{"--listen", ":8080", "--allow-unauthenticated"}, nil, ""},
		{"a token with white space", []string{"--api-token", " a"}, nil, "white space"},
		{"egress canary without a port", []string{"--egress-canary", "example.invalid"}, nil, "HOST:PORT"},
		{"egress window 0", []string{"--egress-window-seconds", "0"}, nil, "--egress-window-seconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c config
			fs := newFlagSet("serve", &c, io.Discard)
			err := parseFlags(fs, &c, tt.args, func(k string) string { return tt.env[k] })
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one saying %q", err, tt.wantErr)
			}
		})
	}
}

// TestServeRefusesAnOpenNonLoopbackAddress: the refusal happens before anything listens
// or opens the data dir.
func TestServeRefusesAnOpenNonLoopbackAddress(t *testing.T) {
	dataDir := t.TempDir() + "/never"
	err := run(context.Background(), []string{"serve", "--listen", "0.0.0.0:0", "--data-dir", dataDir},
		func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--allow-unauthenticated") {
		t.Fatalf("serve on 0.0.0.0 without tokens: %v, want a refusal naming --allow-unauthenticated", err)
	}
	if _, serr := os.Stat(dataDir); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the refused serve created its data dir: %v", serr)
	}
}

// TestTokensGuardTheService: with both tokens, entries B and C and the read API need the
// API (or admin) token, settings the admin token; health stays open.
func TestTokensGuardTheService(t *testing.T) {
	s := startTestService(t, "--api-token", "api-secret", "--admin-token", "admin-secret")
	do := func(method, path, token, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// A probe of a literal loopback URL is a 400 once past the access check: no request
	// leaves the machine.
	probe := `{"url":"http://127.0.0.1/"}`
	tests := []struct {
		method, path, token, body string
		want                      int
	}{
		{"GET", "/healthz", "", "", 200},
		{"GET", "/readyz", "", "", 200},
		{"POST", "/v1/probe", "", probe, 401},
		{"POST", "/v1/probe", "wrong", probe, 401},
		{"POST", "/v1/probe", "api-secret-but-longer", probe, 401},
		{"POST", "/v1/probe", "api-secret", probe, 400},
		{"POST", "/v1/render", "", probe, 401},
		{"POST", "/v1/render", "admin-secret", probe, 400},
		{"POST", "/v1/tasks", "", `{"tasks":[]}`, 401},
		{"GET", "/v1/settings", "", "", 401},
		{"GET", "/v1/settings", "api-secret", "", 200},
		{"PUT", "/v1/settings", "api-secret", `{"max_concurrent_count":7}`, 401},
		{"PUT", "/v1/settings", "admin-secret", `{"max_concurrent_count":7}`, 200},
	}
	for _, tt := range tests {
		if got := do(tt.method, tt.path, tt.token, tt.body); got != tt.want {
			t.Errorf("%s %s with token %q: %d, want %d", tt.method, tt.path, tt.token, got, tt.want)
		}
	}
}

// startConfigured runs the service in-process with c (after the flags' defaults) and
// stops it when t ends.
func startConfigured(t *testing.T, edit func(c *config), args ...string) *service {
	t.Helper()
	var c config
	fs := newFlagSet("serve", &c, io.Discard)
	all := append([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--shutdown-grace-seconds", "2"}, args...)
	if err := parseFlags(fs, &c, all, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	edit(&c)
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := startService(ctx, &c, newLogger(io.Discard, c.LogLevel))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.wait(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service stopped with error: %v", err)
		}
	})
	return svc
}

// TestSlowCallers is the hostile-caller check for callers that send slowly: headers or a body that
// trickle are cut off by the server's read timeouts, and other callers are served
// meanwhile.
func TestSlowCallers(t *testing.T) {
	const headerTimeout, readTimeout = 300 * time.Millisecond, 600 * time.Millisecond
	svc := startConfigured(t, func(c *config) { c.readHeaderTimeout, c.readTimeout = headerTimeout, readTimeout })
	addr := svc.addr.String()

	// trickle writes head at once, then s one byte every 50 ms, and returns how long the
	// server kept the connection open, and what it answered.
	trickle := func(head, s string) (time.Duration, string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer c.Close()
		start := time.Now()
		io.WriteString(c, head)
		closed := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(bufio.NewReader(c))
			closed <- string(b)
		}()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < len(s); i++ {
			if _, err := c.Write([]byte{s[i]}); err != nil {
				break
			}
			select {
			case answer := <-closed:
				return time.Since(start), answer
			case <-tick.C:
			}
		}
		select {
		case answer := <-closed:
			return time.Since(start), answer
		case <-time.After(10 * time.Second):
			t.Error("the server never closed a trickling connection")
			return 0, ""
		}
	}
	slowHeaders := "POST /v1/probe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Padding: " + strings.Repeat("a", 200) + "\r\n\r\n"
	body := `{"url":"http://127.0.0.1/","min_interval_ms":0,"should_render":false}` + strings.Repeat(" ", 100)
	bodyHead := "POST /v1/probe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n"

	type result struct {
		took   time.Duration
		answer string
	}
	results := make(chan result, 2)
	for _, hs := range [][2]string{{"", slowHeaders}, {bodyHead, body}} {
		go func() {
			took, answer := trickle(hs[0], hs[1])
			results <- result{took, answer}
		}()
	}
	// Meanwhile, other callers are served.
	for range 5 {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("a normal caller beside the slow ones: %v %v", resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
	for range 2 {
		r := <-results
		if r.took > readTimeout+time.Second {
			t.Errorf("a trickling caller held its connection %v, want it cut near the read timeouts", r.took)
		}
		// The slow body is answered 400 (its JSON never completed) or cut off.
		if r.answer != "" && !strings.Contains(r.answer, "400 Bad Request") && !strings.Contains(r.answer, "408") {
			t.Errorf("a trickling caller got %q", r.answer)
		}
		t.Logf("a trickling caller was cut off after %v: %q", r.took.Round(time.Millisecond), firstLine(r.answer))
	}
	http.DefaultClient.CloseIdleConnections()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

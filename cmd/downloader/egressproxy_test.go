package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"downloader/internal/proxytest"
	"downloader/origintest"
)

const egressTestPassword = "s3cr3t-Egress-pw"

// TestEgressProxyFlags: --egress-proxy and its credentials (file or environment) are
// checked at start, and no error quotes the password.
func TestEgressProxyFlags(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("crawler:"+egressTestPassword+"\n"), 0o600)
	noColon := filepath.Join(dir, "nocolon")
	os.WriteFile(noColon, []byte(egressTestPassword+"\n"), 0o600)
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		isValid bool
	}{
		{"none", nil, nil, true},
		{"http", []string{"--egress-proxy", "http://127.0.0.1:3128"}, nil, true},
		{"socks5 with a file", []string{"--egress-proxy", "socks5://127.0.0.1:1080", "--egress-proxy-credentials-file", good}, nil, true},
		{"from the environment", nil, map[string]string{"DOWNLOADER_EGRESS_PROXY": "http://127.0.0.1:3128", envEgressProxyCredentials: "crawler:" + egressTestPassword}, true},
		{"credentials in the URL", []string{"--egress-proxy", "http://crawler:" + egressTestPassword + "@127.0.0.1:3128"}, nil, false},
		{"a scheme we do not speak", []string{"--egress-proxy", "https://127.0.0.1:3128"}, nil, false},
		{"no port", []string{"--egress-proxy", "http://127.0.0.1"}, nil, false},
		{"a path", []string{"--egress-proxy", "http://127.0.0.1:3128/x"}, nil, false},
		{"a file without username", []string{"--egress-proxy", "http://127.0.0.1:3128", "--egress-proxy-credentials-file", noColon}, nil, false},
		{"a missing file", []string{"--egress-proxy", "http://127.0.0.1:3128", "--egress-proxy-credentials-file", filepath.Join(dir, "missing")}, nil, false},
		{"a bad environment value", []string{"--egress-proxy", "http://127.0.0.1:3128"}, map[string]string{envEgressProxyCredentials: egressTestPassword}, false},
		{"credentials without a proxy", []string{"--egress-proxy-credentials-file", good}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c config
			fs := newFlagSet("serve", &c, io.Discard)
			err := parseFlags(fs, &c, tt.args, func(k string) string { return tt.env[k] })
			if (err == nil) != tt.isValid {
				t.Fatalf("err %v, want valid=%v", err, tt.isValid)
			}
			if err != nil && strings.Contains(err.Error(), egressTestPassword) {
				t.Errorf("the error quotes the password: %v", err)
			}
			if s := fmt.Sprintf("%+v %#v", c, c); err == nil && strings.Contains(s, egressTestPassword) {
				t.Errorf("the config formats the password: %s", s)
			}
		})
	}
}

// TestServeThroughEgressProxy: the service's probes go through a real squid that asks for
// basic authentication; with the right credentials the origin answers, with wrong ones
// the probe is our own egress failure (egress_unavailable, has_reached_origin=false), and
// the password shows in no answer and no log line.
func TestServeThroughEgressProxy(t *testing.T) {
	sq := proxytest.Squid(t, proxytest.SquidOptions{Username: "crawler", Password: egressTestPassword})
	origin := origintest.New(nil)
	defer origin.Close()
	dir := t.TempDir()
	for _, tc := range []struct {
		name, password string
		isOK           bool
	}{
		{"right credentials", egressTestPassword, true},
		{"wrong credentials", egressTestPassword + "-wrong", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(file, []byte("crawler:"+tc.password+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			s := startTestService(t, "--egress-proxy", sq.URL, "--egress-proxy-credentials-file", file,
				"--connect-to", origin.ConnectTo(), "--log-level", "debug")
			var answers []string
			for i := range 2 {
				resp, m := s.post(t, "/v1/probe", fmt.Sprintf(`{"url":"http://site%d.test/","should_render":false,"min_interval_ms":0}`, i))
				answers = append(answers, fmt.Sprint(m))
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("probe: %d %v", resp.StatusCode, m)
				}
				if tc.isOK {
					if m["has_reached_origin"] != true || m["fail_reason"] != nil {
						t.Errorf("probe %v: want success", m)
					}
				} else if m["has_reached_origin"] != false || m["fail_reason"] != "egress_unavailable" {
					t.Errorf("probe %v: want egress_unavailable, not reached", m)
				}
			}
			for _, path := range []string{"/metrics", "/v1/settings", "/v1/domains"} {
				resp, err := http.Get(s.base + path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				answers = append(answers, string(b))
			}
			s.stop(t)
			for _, a := range append(answers, s.stderr.String()) {
				if strings.Contains(a, tc.password) || strings.Contains(a, egressTestPassword) {
					t.Errorf("the password shows in: %s", a)
				}
			}
		})
	}
}

// Package nginxtest runs Debian's nginx as a real origin for tests: HTTP/1.1 and HTTP/2
// over TLS under a test CA (internal/testca), gzip and brotli, static files with ETag,
// Last-Modified and real 304s, and a limit_req location that answers 429.
//
// The configuration and everything nginx writes live in t.TempDir(). The listening
// sockets are made here, on 127.0.0.1 port 0, and handed to nginx as inherited sockets
// (the NGINX environment variable, nginx's own mechanism for a binary upgrade): no port
// is guessed, none can be taken by another test between choosing and binding, and a
// client may connect at once (the kernel queues it until nginx accepts). Start returns
// once nginx answered a request; Cleanup stops it (SIGQUIT, then SIGKILL if it lingers)
// and waits for it.
package nginxtest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"downloader/internal/testca"
)

// Bin is where Debian's nginx package puts the binary.
const Bin = "/usr/sbin/nginx"

// Debian's libnginx-mod-http-brotli-filter and -static.
const (
	brotliFilterModule = "/usr/lib/nginx/modules/ngx_http_brotli_filter_module.so"
	brotliStaticModule = "/usr/lib/nginx/modules/ngx_http_brotli_static_module.so"
)

// Server is one running nginx.
type Server struct {
	Dir       string // its prefix: nginx.conf, www/, logs
	HTTPSAddr string // 127.0.0.1:port: TLS, ALPN h2 and http/1.1
	HTTPAddr  string // 127.0.0.1:port: plain HTTP/1.1
	CA        *testca.CA
	// HasBrotli: Debian's brotli module is installed and loaded.
	HasBrotli bool
}

// The paths the server answers (besides the files given to Start, under www/):
//
//	/limited/...  limit_req at 1 request a minute per client, no burst: the second
//	              request is a 429 with Retry-After: 30
//	/gzip/...     brotli off: gzip only
//	/misdirected  421 Misdirected Request
const (
	PathLimited     = "/limited/"
	PathGzipOnly    = "/gzip/"
	PathMisdirected = "/misdirected"
)

// The certificate is good for example.com, *.example.com and 127.0.0.1.

// Require returns nginx's path, or skips the test with a clear message outside CI and
// fails it in CI (CI=true), where scripts/setup.sh must have installed it.
func Require(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(Bin); err == nil {
		return Bin
	}
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("nginx not found: scripts/setup.sh installs Debian's nginx package")
	}
	t.Skip("nginx not found (scripts/setup.sh installs Debian's nginx; in CI this is a failure)")
	return ""
}

// Start runs nginx serving files (path under the document root → content) until the
// test ends.
func Start(t testing.TB, files map[string][]byte) *Server {
	t.Helper()
	bin := Require(t)
	dir := t.TempDir()
	ca, err := testca.New()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf("example.com", "*.example.com", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Dir: dir, CA: ca}
	for _, sub := range []string{"www", "logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(rel string, b []byte) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cert.pem", leaf.CertPEM)
	write("key.pem", leaf.KeyPEM)
	write("www/index.html", []byte("<!doctype html><title>nginx</title><p>ready</p>"))
	for p, b := range files {
		write("www/"+strings.TrimPrefix(p, "/"), b)
	}

	https, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		https.Close()
		t.Fatal(err)
	}
	s.HTTPSAddr, s.HTTPAddr = https.Addr().String(), plain.Addr().String()
	var modules []string
	for _, m := range []string{brotliFilterModule, brotliStaticModule} {
		if _, err := os.Stat(m); err == nil {
			modules = append(modules, m)
		}
	}
	s.HasBrotli = len(modules) == 2
	if !s.HasBrotli {
		modules = nil
	}
	write("nginx.conf", []byte(s.config(modules)))

	// The sockets go to nginx as fds 3 and 4; ours are closed once it has them.
	files3, err := https.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	files4, err := plain.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	https.Close()
	plain.Close()
	cmd := exec.Command(bin, "-p", dir+"/", "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "logs", "error.log"), "-g", "daemon off;")
	cmd.Env = []string{"NGINX=3;4;"}
	cmd.ExtraFiles = []*os.File{files3, files4}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		files3.Close()
		files4.Close()
		t.Fatalf("start nginx: %v", err)
	}
	files3.Close()
	files4.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGQUIT) // graceful: the workers finish and exit
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	if err := s.waitReady(exited); err != nil {
		t.Fatalf("nginx did not come up: %v\n%s", err, s.ErrorLog())
	}
	return s
}

// waitReady asks nginx for / until it answers or exits. The first request waits in the
// listen queue until nginx accepts it: no polling.
func (s *Server) waitReady(exited <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.CA.Pool()}}
	defer tr.CloseIdleConnections()
	answered := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+s.HTTPSAddr+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("GET / answered %d", resp.StatusCode)
			}
		}
		answered <- err
	}()
	select {
	case err := <-answered:
		return err
	case err := <-exited:
		cancel()
		<-answered
		return fmt.Errorf("nginx exited: %v", err)
	}
}

// ErrorLog is nginx's error log so far.
func (s *Server) ErrorLog() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "logs", "error.log"))
	return string(b)
}

// Request is one line of the access log.
type Request struct {
	Protocol string // HTTP/1.1, HTTP/2.0
	Status   int
	URI      string
}

// Requests reads the access log: the requests nginx answered, in order (the readiness
// request first). nginx writes a line after the answer went out, so a client that just
// read an answer may not find its line yet.
func (s *Server) Requests() []Request {
	f, err := os.Open(filepath.Join(s.Dir, "logs", "access.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []Request
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r Request
		if _, err := fmt.Sscanf(sc.Text(), "%s %d %s", &r.Protocol, &r.Status, &r.URI); err == nil {
			out = append(out, r)
		}
	}
	return out
}

func (s *Server) config(modules []string) string {
	var b strings.Builder
	if os.Geteuid() == 0 {
		// Root's workers would run as nobody, who cannot enter a test's temp dir.
		name := "root"
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		fmt.Fprintf(&b, "user %s;\n", name)
	}
	for _, m := range modules {
		fmt.Fprintf(&b, "load_module %s;\n", m)
	}
	d := s.Dir
	fmt.Fprintf(&b, `worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/logs/error.log warn;
events { worker_connections 512; }
http {
	log_format t '$server_protocol $status $request_uri';
	access_log %[1]s/logs/access.log t;
	client_body_temp_path %[1]s/tmp/body;
	proxy_temp_path %[1]s/tmp/proxy;
	fastcgi_temp_path %[1]s/tmp/fastcgi;
	uwsgi_temp_path %[1]s/tmp/uwsgi;
	scgi_temp_path %[1]s/tmp/scgi;
	types { text/html html; text/plain txt; text/css css; application/javascript js; application/json json; }
	default_type application/octet-stream;
	keepalive_requests 100000;
	limit_req_zone $binary_remote_addr zone=slow:1m rate=1r/m;
	server {
		listen %[2]s ssl http2;
		listen %[3]s;
		server_name _;
		ssl_certificate %[1]s/cert.pem;
		ssl_certificate_key %[1]s/key.pem;
		root %[1]s/www;
		etag on;
		gzip on;
		gzip_min_length 0;
		gzip_types text/plain text/css application/javascript application/json;
%[4]s
		location %[5]s {
			limit_req zone=slow nodelay;
			limit_req_status 429;
			add_header Retry-After 30 always;
		}
		location %[6]s {
%[7]s
		}
		location = %[8]s { return 421; }
	}
}
`, d, s.HTTPSAddr, s.HTTPAddr, brotliOn(modules), PathLimited, PathGzipOnly, brotliOff(modules), PathMisdirected)
	return b.String()
}

func brotliOn(modules []string) string {
	if len(modules) == 0 {
		return ""
	}
	return "\t\tbrotli on;\n\t\tbrotli_min_length 0;\n\t\tbrotli_types text/plain text/css application/javascript application/json;"
}

func brotliOff(modules []string) string {
	if len(modules) == 0 {
		return ""
	}
	return "\t\t\tbrotli off;"
}

// Package proxytest starts real egress proxies for tests: Debian's squid (HTTP CONNECT,
// optionally with basic authentication) and dante-server's danted (SOCKS5), each on
// 127.0.0.1 on a free port, with its configuration written into a temporary directory,
// and stopped (its whole process group) when the test ends. Test support only.
//
// A missing binary skips the test outside CI (CI unset) and fails it in CI:
// scripts/setup.sh installs both.
package proxytest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Binaries of the Debian packages squid and dante-server.
const (
	SquidPath = "/usr/sbin/squid"
	DantePath = "/usr/sbin/danted"
)

// startTimeout bounds a proxy's start: it is a failure of the test, not a wait for speed.
const startTimeout = 60 * time.Second

// Proxy is a running proxy.
type Proxy struct {
	Addr string // 127.0.0.1:PORT
	URL  string // http://127.0.0.1:PORT or socks5://127.0.0.1:PORT
}

// need skips (outside CI) or fails (in CI) a test whose binary is missing.
func need(t testing.TB, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	msg := fmt.Sprintf("%s not found: install Debian's %s (scripts/setup.sh)", path, pkg)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// FreePort returns a port on 127.0.0.1 that nothing listened on a moment ago (a daemon
// cannot be handed a listener; another process taking the port in between fails the
// start with a clear message).
func FreePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	return port
}

// ClosedPort returns a loopback port that refuses every connection for the rest of the
// test: a TCP socket is bound to it and never listens, so a connection attempt is reset
// ("connection refused") and no other socket, a parallel test's listener included, can
// take the port meanwhile. (A port found free and released, as FreePort's, may be handed
// to another test's listener on 127.0.0.1:0 before the test connects to it, and then
// answers.)
func ClosedPort(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(sa.(*syscall.SockaddrInet4).Port)
}

// sharedDir is a directory the daemons' unprivileged users can read (squid runs its
// helpers as user proxy; t.TempDir's parents are 0700).
func sharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "proxytest-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// SquidOptions configures Squid.
type SquidOptions struct {
	// Username and Password, when set, make the proxy require basic authentication
	// (basic_ncsa_auth over an MD5-crypt file made with openssl).
	Username, Password string
}

// Squid starts squid as an HTTP CONNECT proxy that allows CONNECT to any address and
// port (the tests' origins are on 127.0.0.1, on ephemeral ports).
func Squid(t testing.TB, o SquidOptions) *Proxy {
	t.Helper()
	need(t, SquidPath, "squid")
	dir := sharedDir(t)
	port := FreePort(t)
	var auth string
	if o.Username != "" {
		need(t, "/usr/bin/openssl", "openssl")
		cmd := exec.Command("openssl", "passwd", "-1", "-stdin")
		cmd.Stdin = strings.NewReader(o.Password + "\n")
		hash, err := cmd.Output()
		if err != nil {
			t.Fatalf("openssl passwd: %v", err)
		}
		pw := filepath.Join(dir, "passwd")
		if err := os.WriteFile(pw, []byte(o.Username+":"+strings.TrimSpace(string(hash))+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		auth = "auth_param basic program /usr/lib/squid/basic_ncsa_auth " + pw + "\n" +
			"auth_param basic children 2 startup=1 idle=1\n" +
			"auth_param basic realm proxytest\n" +
			"acl authed proxy_auth REQUIRED\n" +
			"http_access allow authed\n"
	} else {
		auth = "acl loopback src 127.0.0.0/8\nhttp_access allow loopback\n"
	}
	conf := "http_port 127.0.0.1:" + port + "\n" +
		"visible_hostname proxytest\n" +
		"dns_nameservers 127.0.0.1\n" + // never the system's resolver (it is asked for addresses only)
		"pid_filename none\n" +
		"cache_log /dev/stderr\n" +
		"access_log none\n" +
		"cache deny all\n" +
		"cache_mem 8 MB\n" +
		"coredump_dir " + dir + "\n" +
		"pinger_enable off\n" +
		"shutdown_lifetime 0 seconds\n" +
		"connect_timeout 5 seconds\n" +
		auth +
		"http_access deny all\n"
	path := filepath.Join(dir, "squid.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	start(t, exec.Command(SquidPath, "-N", "-f", path), "Accepting HTTP Socket connections", "127.0.0.1:"+port)
	return &Proxy{Addr: "127.0.0.1:" + port, URL: "http://127.0.0.1:" + port}
}

// Dante starts danted as a SOCKS5 proxy without authentication that allows connections
// to any address. (Dante's username method checks the system's user database; a test
// does not add users to the machine, so SOCKS5 authentication is not run against it.)
func Dante(t testing.TB) *Proxy {
	t.Helper()
	need(t, DantePath, "dante-server")
	dir := sharedDir(t)
	port := FreePort(t)
	conf := "logoutput: stderr\n" +
		"internal: 127.0.0.1 port = " + port + "\n" +
		"external: 127.0.0.1\n" +
		"clientmethod: none\n" +
		"socksmethod: none\n" +
		"user.privileged: root\n" +
		"user.unprivileged: nobody\n" +
		"timeout.connect: 10\n" +
		"client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }\n" +
		"socks pass { from: 127.0.0.0/8 to: 0.0.0.0/0 command: connect }\n"
	path := filepath.Join(dir, "danted.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	start(t, exec.Command(DantePath, "-f", path, "-p", filepath.Join(dir, "danted.pid"), "-N", "1"), "running", "127.0.0.1:"+port)
	return &Proxy{Addr: "127.0.0.1:" + port, URL: "socks5://127.0.0.1:" + port}
}

// start runs cmd in a process group of its own and waits until a line of its stderr
// contains ready and addr accepts a connection (squid logs its listener before its
// listen(2): there is nothing else to wait on, so that last step polls). The group is
// killed and reaped when the test ends.
func start(t testing.TB, cmd *exec.Cmd, ready, addr string) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	pid := cmd.Process.Pid
	readyCh := make(chan struct{})
	logDone := make(chan struct{})
	var log strings.Builder // what it said before it was ready, for a failure's message
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		isReady := false
		for sc.Scan() {
			if testing.Verbose() {
				fmt.Fprintln(os.Stderr, sc.Text())
			}
			if !isReady {
				log.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), ready) {
					isReady = true
					close(readyCh)
				}
			}
		}
	}()
	stop := func() {
		syscall.Kill(-pid, syscall.SIGKILL) // the daemon and its helpers: the group it leads
		cmd.Wait()
		<-logDone
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	select {
	case <-readyCh:
		t.Cleanup(stop)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				t.Fatalf("%s logged %q but %s does not accept connections: %v", cmd.Path, ready, addr, err)
			}
		}
	case <-logDone:
		stop()
		t.Fatalf("%s exited before it was ready:\n%s", cmd.Path, log.String())
	case <-ctx.Done():
		stop()
		t.Fatalf("%s not ready in %v:\n%s", cmd.Path, startTimeout, log.String())
	}
}

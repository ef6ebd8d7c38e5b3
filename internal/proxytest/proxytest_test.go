package proxytest

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSquidAndDanteStart: each proxy answers on its address; squid with authentication
// asks for it (407), which shows its configuration is the one written.
func TestSquidAndDanteStart(t *testing.T) {
	sq := Squid(t, SquidOptions{Username: "alice", Password: "s3cret"})
	c, err := net.Dial("tcp", sq.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("squid answered %s to a CONNECT without credentials, want 407", resp.Status)
	}

	d := Dante(t)
	dc, err := net.Dial("tcp", d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	dc.Write([]byte{5, 1, 0})
	var reply [2]byte
	if _, err := dc.Read(reply[:]); err != nil || reply != [2]byte{5, 0} {
		t.Fatalf("danted's greeting reply %v, %v; want [5 0]", reply, err)
	}
}

// TestClosedPortRefusesAndStaysTaken: a connection to a closed port is refused, and the
// port cannot be listened on while the test runs (a parallel test's listener cannot take
// it and answer).
func TestClosedPortRefusesAndStaysTaken(t *testing.T) {
	port := ClosedPort(t)
	if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
		c.Close()
		t.Fatal("a connection to the closed port was accepted")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial: %v; want connection refused", err)
	}
	if ln, err := net.Listen("tcp", "127.0.0.1:"+port); err == nil {
		ln.Close()
		t.Error("another socket could listen on the closed port")
	}
}

package origintest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestLateBodyDoesNotStampTheNextRequest: a request whose last bytes reach the origin
// after its handler started (here the terminator of a chunked body, as net/http sends a
// GET whose body it could not size in time: headers first, body later) must not lend
// their receive time to the next request on the connection. The next request is stamped
// no earlier than the moment the client began to write it: that order is causal (the
// terminator was read before the answer, the answer before that moment), so the check
// needs no timing.
func TestLateBodyDoesNotStampTheNextRequest(t *testing.T) {
	started := make(chan string, 2)
	o := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- r.URL.Path
		// The body is not read here: the server reads (discards) it before it answers.
		io.WriteString(w, "ok")
	}))
	defer o.Close()
	c, err := net.Dial("tcp", o.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	readAnswer := func() {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	firstAt := time.Now()
	if _, err := io.WriteString(c, "GET /first HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-started // the origin has taken /first's arrival
	if _, err := io.WriteString(c, "0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	readAnswer()

	secondAt := time.Now()
	if _, err := io.WriteString(c, "GET /second HTTP/1.1\r\nHost: a.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-started
	readAnswer()

	as := o.Arrivals()
	if len(as) != 2 || as[0].Path != "/first" || as[1].Path != "/second" {
		t.Fatalf("arrivals %+v, want /first then /second", as)
	}
	if n := o.UnstampedCount(); n != 0 {
		t.Errorf("%d arrivals without a kernel time", n)
	}
	// Wall clock against the kernel's receive times (both CLOCK_REALTIME).
	if as[0].At.Before(firstAt.Round(0)) || !as[0].At.Before(secondAt.Round(0)) {
		t.Errorf("/first stamped %v, want within [%v, %v)", as[0].At, firstAt, secondAt)
	}
	if as[1].At.Before(secondAt.Round(0)) {
		t.Errorf("/second stamped %v, %v before the client began to write it: the stamp of /first's late body",
			as[1].At, secondAt.Round(0).Sub(as[1].At))
	}
}

// TestEveryRequestOfAConnectionIsStamped: on a kept-alive connection each request gets a
// kernel time of its own, later than the previous one's.
func TestEveryRequestOfAConnectionIsStamped(t *testing.T) {
	o := New(nil)
	defer o.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for range 5 {
		resp, err := client.Get("http://" + o.Addr() + "/page")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	as := o.Arrivals()
	if len(as) != 5 || o.UnstampedCount() != 0 {
		t.Fatalf("%d arrivals, %d without a kernel time; want 5 and 0", len(as), o.UnstampedCount())
	}
	for i := 1; i < len(as); i++ {
		if as[i].Remote != as[0].Remote {
			t.Errorf("request %d came on %s, not on the first connection %s", i, as[i].Remote, as[0].Remote)
		}
		if !as[i].At.After(as[i-1].At) {
			t.Errorf("request %d stamped %v, not after request %d's %v", i, as[i].At, i-1, as[i-1].At)
		}
	}
}

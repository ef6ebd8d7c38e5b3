// Package faults is the fault-injection suite: the downloader under hostile origins,
// hostile callers, our own egress failing, and restarts (SIGTERM and kill -9 during
// load). It holds only tests (the *_test.go files); this file exists for the doc.
//
// Every test runs against real servers on 127.0.0.1 and asserts three things: the
// classification (SPEC §4), that nothing else was disturbed (a bystander's requests go on
// unharmed), and that nothing leaked (goroutines with goleak, file descriptors through
// /proc/self/fd, browser processes by process group, temporary directories under a TMPDIR
// of the test binary's own).
//
// Nothing here ever connects to an address outside 127.0.0.0/8: host names are answered
// by a fake resolver with pretend public addresses that a test dialer maps onto the
// loopback origin, and private or metadata addresses are only ever seen by the guard's
// classifier; the test dialer records (and fails the test for) any other address it is
// asked to dial, without dialling it.
package faults

package main

import (
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/andybalholm/brotli"

	"downloader/fetch"
)

// The service's memory under worst-case bodies (SPEC §3: the body cap bounds what one
// request costs). Eight entry-B fetches at once of a body that decodes far past the cap, and
// of a body of text at the cap, measured as the peak RSS of a real service process
// (VmHWM). TestBodyMemoryBounded asserts a bound; BenchmarkBodyMemory reports the figures
// for docs/benchmarks.md.

// bodyMemConcurrency is how many worst-case bodies are fetched at once.
const bodyMemConcurrency = 8

// bombDecodedBytes is what a bomb decodes to: 1 GiB of NULs.
const bombDecodedBytes = 1 << 30

// gzipBomb is a gzip member of bombDecodedBytes NULs, about 1 MiB. Compressing 1 GiB
// takes seconds; the same 1 MiB of NULs compressed once and ended with a sync flush is a
// run of non-final deflate blocks that refer only to themselves, so the stream is that run
// repeated, an empty final block, and the trailer.
func gzipBomb(t testing.TB) []byte {
	t.Helper()
	const chunkBytes = 1 << 20
	zero := make([]byte, chunkBytes)
	var chunk bytes.Buffer
	fw, err := flate.NewWriter(&chunk, flate.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(zero)
	fw.Flush()
	var b bytes.Buffer
	b.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}) // gzip header: deflate, no name, no time
	crc := uint32(0)
	for range bombDecodedBytes / chunkBytes {
		b.Write(chunk.Bytes())
		crc = crc32.Update(crc, crc32.IEEETable, zero)
	}
	b.Write([]byte{0x03, 0x00}) // a final fixed-Huffman block holding only its end
	b.Write(binary.LittleEndian.AppendUint32(nil, crc))
	b.Write(binary.LittleEndian.AppendUint32(nil, uint32(bombDecodedBytes&0xffffffff)))
	return b.Bytes()
}

// brBomb is a brotli stream of bombDecodedBytes NULs.
func brBomb(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	w := brotli.NewWriterLevel(&b, 1)
	zero := make([]byte, 1<<20)
	for range bombDecodedBytes / len(zero) {
		w.Write(zero)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// textPage is an HTML page of visible text, the body cap in size: the most entry B's
// answer makes of a body (its html and its text both near the cap).
func textPage() []byte {
	var b bytes.Buffer
	b.WriteString("<!doctype html><html><head><title>words</title></head><body>\n")
	for i := 0; b.Len() < fetch.DefaultMaxBodyBytes-64; i++ {
		fmt.Fprintf(&b, "<p>Paragraph %d of plain visible text, word after word.</p>\n", i)
	}
	b.WriteString("</body></html>\n")
	return b.Bytes()
}

// bodyMemCase is one worst-case body and how it is served.
type bodyMemCase struct {
	name     string
	encoding string // Content-Encoding
	body     []byte
}

func bodyMemCases(t testing.TB) []bodyMemCase {
	return []bodyMemCase{
		{"gzip bomb", "gzip", gzipBomb(t)},
		{"br bomb", "br", brBomb(t)},
		{"text at the cap", "", textPage()},
	}
}

// memOrigin serves each case at /<index> on every host.
func memOrigin(t testing.TB, cases []bodyMemCase) *httptest.Server {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if err != nil || i < 0 || i >= len(cases) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		if cases[i].encoding != "" {
			w.Header().Set("Content-Encoding", cases[i].encoding)
		}
		w.Write(cases[i].body)
	}))
	t.Cleanup(o.Close)
	return o
}

// serviceBinary builds cmd/downloader into a temporary directory of t: the service must be
// a process of its own for its RSS to mean anything. BODYMEM_BINARY names another build
// to measure instead (an older commit's, to compare).
func serviceBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("BODYMEM_BINARY"); bin != "" {
		return bin
	}
	return buildBinary(t)
}

// memService is a running service process.
type memService struct {
	cmd    *exec.Cmd
	base   string
	stderr *syncBuffer
}

func startMemService(t testing.TB, bin, origin string) *memService {
	t.Helper()
	s := &memService{stderr: &syncBuffer{}}
	s.cmd = exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--connect-to", "::"+strings.TrimPrefix(origin, "http://"),
		"--renderer-endpoint", "ws://127.0.0.1:1/devtools/browser", "--shutdown-grace-seconds", "5",
		"--log-level", "warn")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOWNLOADER_") {
			env = append(env, kv)
		}
	}
	s.cmd.Env = env
	s.cmd.Stderr = s.stderr
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("service did not start: %v\n%s", err, s.stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	s.base = strings.TrimSpace(strings.TrimPrefix(line, "downloader: listening on "))
	return s
}

// stop stops the service and waits for it (again: nothing).
func (s *memService) stop() {
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Signal(os.Interrupt)
		s.cmd.Wait()
	}
}

// procStatusKB reads a "Name:   N kB" line of /proc/<pid>/status.
func procStatusKB(t testing.TB, pid int, name string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return 0
}

// peakGrowth fetches case i through entry B bodyMemConcurrency times at once (each from
// a host of its own) and returns how far the service's peak RSS rose above its RSS before,
// in bytes, and the bytes of the answers.
func (s *memService) peakGrowth(t testing.TB, i, round int) (growth, answered int64) {
	t.Helper()
	pid := s.cmd.Process.Pid
	// Reset the peak (VmHWM) to the RSS now (proc(5), clear_refs 5).
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
	before := procStatusKB(t, pid, "VmRSS")
	var wg sync.WaitGroup
	sizes := make([]int64, bodyMemConcurrency)
	errs := make([]error, bodyMemConcurrency)
	for k := range bodyMemConcurrency {
		wg.Go(func() {
			body := fmt.Sprintf(`{"url":"http://r%d-w%d.test/%d","should_render":false,"min_interval_ms":0}`, round, k, i)
			resp, err := http.Post(s.base+"/v1/render", "application/json", strings.NewReader(body))
			if err != nil {
				errs[k] = err
				return
			}
			defer resp.Body.Close()
			sizes[k], err = io.Copy(io.Discard, resp.Body)
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			errs[k] = err
		})
	}
	wg.Wait()
	peak := procStatusKB(t, pid, "VmHWM")
	for k, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v (peak RSS growth so far %d MiB)\n%s", k, err, (peak-before)>>10, s.stderr.String())
		}
		answered += sizes[k]
	}
	return (peak - before) << 10, answered
}

// bodyMemCapMultiple is what one request may cost, in body caps: the body (1), the
// answer's html and text (2), the HTML tokenizer's buffer for a token as long as the body
// (up to 2 while it grows), and Go's heap goal, twice the live heap: about 10, asserted
// at 12 (docs/benchmarks.md has the figures; before the bound, a gzip bomb cost 40).
const bodyMemCapMultiple = 12

// bodyMemBound is the bound asserted on the peak RSS growth under bodyMemConcurrency
// worst-case bodies (SPEC §3: a few times N × the cap).
const bodyMemBound = bodyMemConcurrency * bodyMemCapMultiple * fetch.DefaultMaxBodyBytes

// TestBodyMemoryBounded: eight entry-B fetches at once of a gzip bomb (1 GiB of NULs) and
// of a page of text at the cap raise the service's peak RSS by less than 8 ×
// bodyMemCapMultiple × the body cap. (BenchmarkBodyMemory adds the brotli bomb.)
func TestBodyMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the service binary")
	}
	// The peak RSS is the service process's own, which no other test's work can raise:
	// run after the sequential tests, by when TestMain's build of the binary is done.
	t.Parallel()
	// Not the brotli bomb: BenchmarkBodyMemory measures it, for the same bound. Building it
	// compresses 1 GiB under the race detector, which cost this test most of its time.
	cases := []bodyMemCase{
		{"gzip bomb", "gzip", gzipBomb(t)},
		{"text at the cap", "", textPage()},
	}
	o := memOrigin(t, cases)
	bin := serviceBinary(t)
	for i, c := range cases {
		// A process of its own per case: memory the runtime kept from an earlier case
		// would hide this one's growth.
		s := startMemService(t, bin, o.URL)
		growth, answered := s.peakGrowth(t, i, 0)
		s.stop()
		t.Logf("%s: peak RSS growth %d MiB, answers %d MiB", c.name, growth>>20, answered>>20)
		if growth > bodyMemBound {
			t.Errorf("%s: peak RSS rose by %d MiB under %d concurrent bodies, want under %d MiB (%d × the %d MiB cap each)",
				c.name, growth>>20, bodyMemConcurrency, bodyMemBound>>20, bodyMemCapMultiple, fetch.DefaultMaxBodyBytes>>20)
		}
	}
}

// BenchmarkBodyMemory reports the service's peak RSS growth per round of eight concurrent
// worst-case bodies (docs/benchmarks.md).
func BenchmarkBodyMemory(b *testing.B) {
	cases := bodyMemCases(b)
	o := memOrigin(b, cases)
	bin := serviceBinary(b)
	for i, c := range cases {
		b.Run(strings.ReplaceAll(c.name, " ", "-"), func(b *testing.B) {
			s := startMemService(b, bin, o.URL)
			var worst, answered int64
			round := 0
			for b.Loop() {
				g, a := s.peakGrowth(b, i, round)
				worst, answered = max(worst, g), a
				round++
			}
			b.ReportMetric(float64(worst)/(1<<20), "peak_rss_growth_MiB")
			b.ReportMetric(float64(worst)/float64(bodyMemConcurrency*fetch.DefaultMaxBodyBytes), "x_cap_per_request")
			b.ReportMetric(float64(answered)/(1<<20), "answers_MiB")
		})
	}
}

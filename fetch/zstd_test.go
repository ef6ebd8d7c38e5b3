package fetch

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// zstdBytes encodes b with the klauspost encoder (a real encoder, the one Go servers
// use), in one frame of the given window.
func zstdBytes(t testing.TB, b []byte, window int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(window),
		zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hugeWindowFrame is a zstd frame whose header asks for a 64 MiB window (RFC 8878
// §3.1.1.1: Window_Descriptor exponent 16, windowLog 26) before one small raw block: a
// decoder that honours the header allocates the window before it reads a byte of
// content. The library's default limit (512 MB) would accept it; RFC 9659's does not.
func hugeWindowFrame(content []byte) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, 0xFD2FB528) // magic
	b = append(b, 0x00)                                 // descriptor: no single segment, no checksum, no dictionary
	b = append(b, 16<<3)                                // window descriptor: 2^(10+16)
	hdr := uint32(1) | uint32(len(content))<<3          // last block, raw, its size
	b = append(b, byte(hdr), byte(hdr>>8), byte(hdr>>16))
	return append(b, content...)
}

// TestFetchZstd: zstd beside gzip, deflate and br (SPEC §5): asked for, decoded, and
// bounded like the others: a bomb stops at the body cap (decoded bytes), and a frame that
// asks for a window over RFC 9659's 8 MB is refused before anything is allocated for it.
func TestFetchZstd(t *testing.T) {
	const maxBody = 256 << 10
	bomb := bytes.Repeat([]byte("a"), 64<<20) // 64 MiB of text, 256 times the cap
	page := []byte(okPage)
	bodies := map[string][]byte{
		"/page":       zstdBytes(t, page, 1<<20),
		"/bomb":       zstdBytes(t, bomb, 8<<20),
		"/chain":      zstdBytes(t, gzipBytes(page), 1<<20),
		"/hugewindow": hugeWindowFrame(page),
		"/corrupt":    []byte("\x28\xb5\x2f\xfdnot zstd after the magic"),
	}
	if len(bodies["/bomb"]) > 64<<10 {
		t.Fatalf("the bomb is %d bytes compressed: not a bomb", len(bodies["/bomb"]))
	}
	codings := map[string]string{"/chain": "gzip, zstd"}
	var gotAE string
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		gotAE = r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "text/html")
		ce := codings[r.URL.Path]
		if ce == "" {
			ce = "zstd"
		}
		w.Header().Set("Content-Encoding", ce)
		w.Write(bodies[r.URL.Path])
	})
	e := newEnv(t, o, withConfig(func(c *Config) { c.MaxBodyBytes = maxBody }))
	tests := []struct {
		path        string
		bodyBytes   int64
		isTruncated bool
	}{
		{"/page", int64(len(page)), false},
		{"/chain", int64(len(page)), false},
		{"/bomb", maxBody, true},
		{"/hugewindow", 0, false},
		{"/corrupt", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			out := e.fetch(context.Background(), "http://zstd.test"+tt.path)
			if out.FailReason != "" || out.HTTPStatus != 200 {
				t.Fatalf("outcome %q %d, want a 200 success", out.FailReason, out.HTTPStatus)
			}
			if out.HealthSignal.BodyBytes != tt.bodyBytes || int64(len(out.Body)) != tt.bodyBytes {
				t.Errorf("body_bytes = %d (len %d), want %d", out.HealthSignal.BodyBytes, len(out.Body), tt.bodyBytes)
			}
			if out.HealthSignal.IsBodyTruncated != tt.isTruncated {
				t.Errorf("is_body_truncated = %v, want %v", out.HealthSignal.IsBodyTruncated, tt.isTruncated)
			}
			if tt.bodyBytes == int64(len(page)) && !bytes.Equal(out.Body, page) {
				t.Errorf("decoded body = %q, want the page", out.Body)
			}
		})
	}
	if gotAE != "gzip, deflate, br, zstd" {
		t.Errorf("Accept-Encoding = %q, want zstd offered beside gzip, deflate and br", gotAE)
	}
}

// TestZstdBombMemory: decoding a zstd bomb up to the cap allocates about the window, not
// the bomb: the window limit holds in memory, not only in the bytes returned. (The test
// runs alone: no test of this package is parallel, so the counter is this decode's.)
func TestZstdBombMemory(t *testing.T) {
	const maxBody = 1 << 20
	bomb := zstdBytes(t, bytes.Repeat([]byte("z"), 256<<20), 8<<20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r, err := newZstdReader(bytes.NewReader(bomb))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(r, maxBody))
	runtime.ReadMemStats(&after)
	if n != maxBody {
		t.Fatalf("decoded %d bytes, want %d", n, maxBody)
	}
	// The decoder's window (at most zstdMaxWindow) and its block buffers.
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("decoding 1 MiB of a 256 MiB zstd bomb allocated %d bytes", got)
	if got > 4*zstdMaxWindow {
		t.Errorf("decoding 1 MiB of a 256 MiB bomb allocated %d bytes, want under %d", got, 4*zstdMaxWindow)
	}
}

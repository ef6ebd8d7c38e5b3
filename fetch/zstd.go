package fetch

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// zstdMaxWindow bounds the history a zstd body may ask us to keep: RFC 9659 §3 caps the
// window of the "zstd" content coding at 8 MB, and a frame that declares more is refused
// before anything is allocated for it. Without it, one frame header could ask for
// gigabytes (the library's default accepts 512 MB): a decompression bomb in memory, even
// though the decoded bytes themselves are cut at the body cap by readBody.
const zstdMaxWindow = 8 << 20

// newZstdReader decodes a zstd body from r. The decoder runs on the caller's goroutine
// (concurrency 1: no goroutines to leak when a capped body is left half read), keeps a
// window of at most zstdMaxWindow, and frees its buffers when the stream ends or fails.
// What it decodes is cut at the body cap by readBody's reader, like every other coding's;
// the window is not tied to the cap, so a body longer than the cap is truncated, not
// refused.
func newZstdReader(r io.Reader) (io.Reader, error) {
	d, err := zstd.NewReader(r,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(zstdMaxWindow),
		zstd.WithDecoderMaxMemory(zstdMaxWindow),
	)
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	return &zstdReader{d: d}, nil
}

// zstdReader closes its decoder once the stream ended, so its buffers go back at once.
type zstdReader struct {
	d *zstd.Decoder
}

func (z *zstdReader) Read(p []byte) (int, error) {
	if z.d == nil {
		return 0, io.EOF
	}
	n, err := z.d.Read(p)
	if err != nil {
		z.d.Close()
		z.d = nil
	}
	return n, err
}

package pagevalue

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// BenchmarkEncodeLevel compresses real HTML documents (the Go distribution's own, always
// beside the toolchain) and one synthetic news-list page at each zstd level a page codec
// could use, reporting the CPU per page (ns/op, one core) and the size kept
// (compressed_ratio: compressed ÷ raw). The page codec's level (pageLevel) is chosen from
// this table (docs/decisions.md).
//
//	go test -run '^$' -bench BenchmarkEncodeLevel ./store/pagevalue/
func BenchmarkEncodeLevel(b *testing.B) {
	pages := map[string][]byte{"synthetic-60k": syntheticPage()}
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Fatalf("go env GOROOT: %v", err)
	}
	for _, name := range []string{"go_mem.html", "asm.html", "go_spec.html"} {
		body, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "doc", name))
		if err != nil {
			b.Fatalf("a real HTML page from the Go distribution: %v", err)
		}
		pages[strings.TrimSuffix(name, ".html")] = body
	}
	levels := []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression}
	for _, name := range []string{"go_mem", "asm", "synthetic-60k", "go_spec"} {
		body := pages[name]
		for _, lvl := range levels {
			b.Run(fmt.Sprintf("%s/%s", name, lvl), func(b *testing.B) {
				enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(lvl), zstd.WithEncoderConcurrency(1))
				if err != nil {
					b.Fatal(err)
				}
				defer enc.Close()
				var dst []byte
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					dst = enc.EncodeAll(body, dst[:0])
				}
				b.ReportMetric(float64(len(dst))/float64(len(body)), "compressed_ratio")
			})
		}
	}
}

// syntheticPage is the store's benchmark page (store/embedded's pageBody): 60 kB of a news
// list, far more repetitive than a real page.
func syntheticPage() []byte {
	var sb bytes.Buffer
	sb.WriteString("<!doctype html><html><head><title>page 1</title></head><body>")
	for j := 0; sb.Len() < 60_000; j++ {
		fmt.Fprintf(&sb, "<div class=\"item\"><a href=\"/articles/1/%d\">第 %d 条新闻标题</a><p>正文摘要 %d</p></div>\n", j, j, j)
	}
	sb.WriteString("</body></html>")
	return sb.Bytes()
}

package embedded

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"downloader"
)

// Run with, for example:
//
//	go test -run '^$' -bench . -benchtime 2s ./store/embedded/
//
// STORE_BENCH_RECORDS sets the size of the FetchResults benchmark (default 1000000).

func openBench(b *testing.B, write *pebble.WriteOptions) *Store {
	b.Helper()
	s, err := open(b.TempDir(), nil, options{resultWrite: write, pageWrite: write})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

var writeModes = []struct {
	name  string
	write *pebble.WriteOptions
}{{"sync", pebble.Sync}, {"nosync", pebble.NoSync}}

// writerCounts: one writer (a lower bound: every commit waits for its own fsync) and 32
// (a busy lease loop: commits group behind one fsync).
var writerCounts = []int{1, 32}

func benchResult(i int64) *downloader.FetchResult {
	status, raw := 200, 5123
	return &downloader.FetchResult{
		Summary: downloader.Summary{
			Domain: fmt.Sprintf("d%d.example", i%10000), HTTPStatus: &status, RawTextLength: &raw,
			HealthSignal:     &downloader.HealthSignal{ElapsedMs: 120, BodyBytes: 48213, ContentType: "text/html"},
			HasReachedOrigin: true,
		},
		TaskID:    fmt.Sprintf("task-%d", i),
		URL:       fmt.Sprintf("https://d%d.example/articles/%d.html", i%10000, i),
		Entry:     downloader.EntryLease,
		FetchedAt: time.Unix(1_780_000_000, i*1000).UTC(),
		PageKey:   strings.Repeat("ab", 32),
	}
}

func BenchmarkPutFetchResult(b *testing.B) {
	for _, m := range writeModes {
		for _, writers := range writerCounts {
			b.Run(fmt.Sprintf("%s/writers=%d", m.name, writers), func(b *testing.B) {
				s := openBench(b, m.write)
				ctx := b.Context()
				var n atomic.Int64
				b.SetParallelism((writers + 1) / 2) // GOMAXPROCS is 2 on the reference machine
				if writers == 1 {
					b.SetParallelism(1)
				}
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := s.PutFetchResult(ctx, benchResult(n.Add(1))); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			})
		}
	}
}

// pageBody returns a ~60 KB HTML page, distinct for each i.
func pageBody(i int64) []byte {
	var sb strings.Builder
	fmt.Fprintf(&sb, "<!doctype html><html><head><title>page %d</title></head><body>", i)
	for j := 0; sb.Len() < 60_000; j++ {
		fmt.Fprintf(&sb, "<div class=\"item\"><a href=\"/articles/%d/%d\">第 %d 条新闻标题</a><p>正文摘要 %d</p></div>\n", i, j, j, i*int64(j))
	}
	sb.WriteString("</body></html>")
	return []byte(sb.String())
}

func BenchmarkPutPage(b *testing.B) {
	for _, m := range writeModes {
		for _, writers := range writerCounts {
			b.Run(fmt.Sprintf("%s/writers=%d", m.name, writers), func(b *testing.B) {
				s := openBench(b, m.write)
				ctx := b.Context()
				// Bodies are built before timing; 64 distinct bodies reused with a unique
				// suffix so every put is a new page.
				bodies := make([][]byte, 64)
				for i := range bodies {
					bodies[i] = pageBody(int64(i))
				}
				var n, stored atomic.Int64
				b.SetParallelism((writers + 1) / 2)
				if writers == 1 {
					b.SetParallelism(1)
				}
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						body := strconv.AppendInt(append([]byte(nil), bodies[i%64]...), i, 10)
						stored.Add(int64(len(body)))
						if _, err := s.PutPage(ctx, &downloader.Page{URL: "https://a.example/", Body: body}); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
				b.SetBytes(stored.Load() / int64(b.N))
			})
		}
	}
	b.Run("duplicate", func(b *testing.B) {
		s := openBench(b, pebble.Sync)
		ctx := b.Context()
		p := &downloader.Page{URL: "https://a.example/", Body: pageBody(1)}
		if _, err := s.PutPage(ctx, p); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			if _, err := s.PutPage(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
	})
}

func BenchmarkPage(b *testing.B) {
	s := openBench(b, pebble.NoSync)
	ctx := b.Context()
	p := &downloader.Page{URL: "https://a.example/", Body: pageBody(1)}
	key, err := s.PutPage(ctx, p)
	if err != nil {
		b.Fatal(err)
	}
	v, _ := s.codec.Encode(p, 0)
	b.SetBytes(int64(len(p.Body)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Page(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(v))/float64(len(p.Body)), "stored/body")
}

// BenchmarkFetchResults lists pages of results from a store of STORE_BENCH_RECORDS records
// (10^4 domains of 100 records each at the default size, plus one rare domain).
func BenchmarkFetchResults(b *testing.B) {
	total := int64(1_000_000)
	if v := os.Getenv("STORE_BENCH_RECORDS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 2000 {
			b.Fatalf("STORE_BENCH_RECORDS=%q: want a number >= 2000", v)
		}
		total = n
	}
	s := openBench(b, pebble.NoSync)
	ctx := b.Context()
	start := time.Now()
	batch := s.db.NewBatch()
	for i := range total {
		r := benchResult(i)
		if i == total/2 {
			r.Domain = "rare.example"
		}
		v, err := json.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.addFetchResult(batch, r.Domain, r.FetchedAt, v); err != nil {
			b.Fatal(err)
		}
		if batch.Len() > 4<<20 {
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			_ = batch.Close()
			batch = s.db.NewBatch()
		}
	}
	if err := batch.Commit(pebble.Sync); err != nil {
		b.Fatal(err)
	}
	_ = batch.Close()
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d records in %s", total, time.Since(start).Round(time.Millisecond))

	// A cursor half way through the whole listing.
	middle := ""
	for range total / 2 / maxLimit {
		_, next, err := s.FetchResults(ctx, "", maxLimit, middle)
		if err != nil {
			b.Fatal(err)
		}
		middle = next
	}
	b.ResetTimer()

	for _, tc := range []struct {
		name, domain, cursor string
	}{
		{"all/first", "", ""},
		{"all/middle", "", middle},
		{"domain/first", "d42.example", ""},
		{"domain/rare", "rare.example", ""},
		{"domain/unknown", "unknown.example", ""},
	} {
		b.Run(tc.name+"/limit=100", func(b *testing.B) {
			for b.Loop() {
				got, _, err := s.FetchResults(ctx, tc.domain, 100, tc.cursor)
				if err != nil {
					b.Fatal(err)
				}
				if len(got) == 0 && tc.domain != "unknown.example" {
					b.Fatal("empty page")
				}
			}
		})
	}
}

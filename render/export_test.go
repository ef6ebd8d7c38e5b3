package render

import "testing"

// What the external test package (servicebench_test.go) uses of the package's own test
// code: the crawl benchmark, which needs a service that only packages importing render
// can build.

// TestUserAgent is the user agent of the tests' browsers.
const TestUserAgent = testUserAgent

// CrawlService is crawlService.
type CrawlService = crawlService

// BenchRenderCrawl runs the crawl benchmark's grid with service as its service variant.
func BenchRenderCrawl(b *testing.B, service CrawlService) { benchRenderCrawl(b, service) }

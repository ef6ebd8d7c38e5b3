package engine

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/japanese"
	"golang.org/x/text/encoding/korean"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/traditionalchinese"

	"downloader"
	"downloader/limiter"
)

// pageRecorder is a page store that keeps what it is given.
type pageRecorder struct {
	mu    sync.Mutex
	pages []downloader.Page
}

func (p *pageRecorder) PutPage(_ context.Context, pg *downloader.Page) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pages = append(p.pages, *pg)
	return "k", nil
}

func (p *pageRecorder) Page(context.Context, string) (*downloader.Page, error) {
	return nil, downloader.Errorf(downloader.ENOTFOUND, "no page")
}

func (p *pageRecorder) LatestPage(context.Context, string) (downloader.PageRef, bool, error) {
	return downloader.PageRef{}, false, nil
}

// renderedRenderer answers every render with a fixed rendered DOM, as the pool does: UTF-8
// HTML and its text, with the main document's Content-Type as served.
type renderedRenderer struct {
	servedCT string
	dom      string
}

func (r renderedRenderer) AcquireSlot(context.Context) (func(), *downloader.Outcome) {
	return func() {}, nil
}

func (r renderedRenderer) RenderInSlot(ctx context.Context, u *url.URL, adm *limiter.Admission, _ limiter.HopAdmitter, _ downloader.RenderOptions) *downloader.Outcome {
	n := 1
	return &downloader.Outcome{HTTPStatus: 200, RawTextLength: &n, TextLength: &n, Body: []byte(r.dom), Text: "rendered",
		HealthSignal: downloader.HealthSignal{ContentType: r.servedCT}}
}

// TestRenderContentIsUTF8: entry B's html and text of a plain fetch are the page decoded
// from its charset (header or <meta>), the page store keeps the bytes as served with their
// Content-Type, and a render's page is stored as the UTF-8 it is.
func TestRenderContentIsUTF8(t *testing.T) {
	pages := []struct {
		label string
		enc   encoding.Encoding
		text  string
	}{
		{"gbk", simplifiedchinese.GBK, "简体中文网页"},
		{"big5", traditionalchinese.Big5, "繁體中文網頁"},
		{"shift_jis", japanese.ShiftJIS, "日本語のページ"},
		{"euc-kr", korean.EUCKR, "한국어 웹 페이지"},
	}
	for _, pg := range pages {
		for _, inHeader := range []bool{true, false} {
			ct, meta := "text/html; charset="+pg.label, ""
			if !inHeader {
				ct, meta = "text/html", `<meta charset="`+pg.label+`">`
			}
			doc := "<html><head>" + meta + "<title>x</title></head><body><p>" + pg.text + "</p></body></html>"
			served, err := pg.enc.NewEncoder().Bytes([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			t.Run(pg.label+"/"+ct, func(t *testing.T) {
				e, _, _, _ := newTestEngine(t)
				store := &pageRecorder{}
				e.cfg.Pages = store
				e.cfg.Fetcher = fetcherFunc(func(ctx context.Context, u *url.URL, adm *limiter.Admission, hops limiter.HopAdmitter) *downloader.Outcome {
					return &downloader.Outcome{HTTPStatus: 200, HealthSignal: downloader.HealthSignal{ContentType: ct}, Body: served}
				})
				u, _ := url.Parse("http://a.test/")
				res, err := e.Render(context.Background(), downloader.Request{URL: u.String(), Domain: "a.test", ShouldStore: true}, u)
				if err != nil {
					t.Fatal(err)
				}
				if res.Outcome.Text != pg.text {
					t.Errorf("text = %q, want %q", res.Outcome.Text, pg.text)
				}
				if !utf8.ValidString(res.HTML) || !strings.Contains(res.HTML, "<p>"+pg.text+"</p>") {
					t.Errorf("html = %q, want UTF-8 holding %q", res.HTML, pg.text)
				}
				if len(store.pages) != 1 || string(store.pages[0].Body) != string(served) || store.pages[0].ContentType != ct {
					t.Errorf("stored %+v, want the bytes as served with %q", store.pages, ct)
				}
			})
		}
	}

	t.Run("a render is stored as UTF-8", func(t *testing.T) {
		e, _, _, _ := newTestEngine(t)
		store := &pageRecorder{}
		e.cfg.Pages = store
		dom := `<html><head><meta charset="gbk"></head><body><p>简体中文网页</p></body></html>`
		e.cfg.Renderer = renderedRenderer{servedCT: "text/html; charset=gbk", dom: dom}
		u, _ := url.Parse("http://a.test/")
		res, err := e.Render(context.Background(), downloader.Request{URL: u.String(), Domain: "a.test", ShouldRender: true, ShouldStore: true}, u)
		if err != nil {
			t.Fatal(err)
		}
		if res.HTML != dom || res.Outcome.Text != "rendered" {
			t.Errorf("html %q text %q, want the renderer's", res.HTML, res.Outcome.Text)
		}
		if res.Summary.HealthSignal.ContentType != "text/html; charset=gbk" {
			t.Errorf("health_signal.content_type = %q, want the header as served", res.Summary.HealthSignal.ContentType)
		}
		if len(store.pages) != 1 || store.pages[0].ContentType != "text/html; charset=utf-8" {
			t.Errorf("stored %+v, want the DOM labelled UTF-8", store.pages)
		}
	})
}

package main

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/japanese"
	"golang.org/x/text/encoding/korean"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/traditionalchinese"

	"downloader/origintest"
)

// TestPagesInTheSeedsCharsets: pages served in GBK, Big5, Shift_JIS and EUC-KR, with the
// charset in the Content-Type header or only in a <meta>, come back from entry B as
// correct UTF-8 (html and text), for a plain fetch and a render (real headless Chromium)
// alike; raw_text_length counts the characters, and the page store's reader answers the
// stored page in UTF-8.
func TestPagesInTheSeedsCharsets(t *testing.T) {
	t.Parallel() // owns its service, origin and data dir (longTests in main_test.go)
	pages := []struct {
		label string
		enc   encoding.Encoding
		text  string
	}{
		{"gbk", simplifiedchinese.GBK, "简体中文网页，欢迎访问新闻中心"},
		{"big5", traditionalchinese.Big5, "繁體中文網頁，歡迎光臨"},
		{"shift_jis", japanese.ShiftJIS, "日本語のページへようこそ"},
		{"euc-kr", korean.EUCKR, "한국어 웹 페이지에 오신 것을 환영합니다"},
	}
	type served struct {
		ct   string
		body []byte
	}
	bodies := map[string]served{} // by path
	for _, p := range pages {
		for _, where := range []string{"header", "meta"} {
			ct, meta := "text/html; charset="+p.label, ""
			if where == "meta" {
				ct, meta = "text/html", `<meta http-equiv="Content-Type" content="text/html; charset=`+p.label+`">`
			}
			doc := "<!doctype html><html><head>" + meta + "<title>t</title></head><body><p>" + p.text + "</p></body></html>"
			b, err := p.enc.NewEncoder().Bytes([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			bodies["/"+p.label+"/"+where] = served{ct, b}
		}
	}
	origin := origintest.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := bodies[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", s.ct)
		w.Write(s.body)
	}))
	defer origin.Close()
	s := startTestService(t, "--connect-to", origin.ConnectTo(), "--render-concurrency", "1")

	for _, p := range pages {
		for _, where := range []string{"header", "meta"} {
			for _, shouldRender := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/should_render=%v", p.label, where, shouldRender), func(t *testing.T) {
					u := fmt.Sprintf("http://%s.example.cn/%s/%s", strings.ReplaceAll(p.label, "_", "-"), p.label, where)
					resp, m := s.post(t, "/v1/render", fmt.Sprintf(`{"url":%q,"min_interval_ms":0,"should_render":%v,"should_store":true}`, u, shouldRender))
					if resp.StatusCode != 200 || m["fail_reason"] != nil {
						t.Fatalf("answer %d %v", resp.StatusCode, m)
					}
					html, _ := m["html"].(string)
					text, _ := m["text"].(string)
					if !strings.Contains(html, "<p>"+p.text+"</p>") {
						t.Errorf("html = %q, want it to hold %q", html, p.text)
					}
					if text != p.text {
						t.Errorf("text = %q, want %q", text, p.text)
					}
					want := float64(utf8.RuneCountInString(p.text))
					if m["raw_text_length"] != want {
						t.Errorf("raw_text_length = %v, want %v", m["raw_text_length"], want)
					}
					if shouldRender && m["text_length"] != want {
						t.Errorf("text_length = %v, want %v", m["text_length"], want)
					}
					key, _ := m["page_key"].(string)
					if key == "" {
						t.Fatalf("no page_key: %v", m)
					}
					pr, err := http.Get(s.base + "/v1/pages/" + key)
					if err != nil {
						t.Fatal(err)
					}
					defer pr.Body.Close()
					page, _ := io.ReadAll(pr.Body)
					_, params, _ := mime.ParseMediaType(pr.Header.Get("Content-Type"))
					if pr.StatusCode != 200 || params["charset"] != "utf-8" || !utf8.Valid(page) || !strings.Contains(string(page), p.text) {
						t.Errorf("GET /v1/pages/%s: %d %q %q, want UTF-8 holding %q", key, pr.StatusCode, pr.Header.Get("Content-Type"), page, p.text)
					}
				})
			}
		}
	}
}

package server

import (
	"net/http/httptest"
	"strconv"
	"testing"

	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/traditionalchinese"

	"downloader"
)

// TestPageReaderAnswersUTF8: GET /v1/pages/{key} answers a stored text page in UTF-8,
// decoded from the charset it was served in (header or <meta>), with the Content-Type as
// served beside it; a body that is not text comes back byte for byte.
func TestPageReaderAnswersUTF8(t *testing.T) {
	h := newStoreHarness(t, &fakeFetcher{})
	gbk, _ := simplifiedchinese.GBK.NewEncoder().Bytes([]byte("<p>简体中文</p>"))
	big5, _ := traditionalchinese.Big5.NewEncoder().Bytes([]byte(`<meta charset="big5"><p>繁體中文</p>`))
	png := []byte("\x89PNG\r\n\x1a\n\x00\xff\xfe")
	tests := []struct {
		name, ct string
		body     []byte
		wantBody string
		wantCT   string
	}{
		{"gbk in the header", "text/html; charset=GBK", gbk, "<p>简体中文</p>", "text/html; charset=utf-8"},
		{"big5 only in meta", "text/html", big5, `<meta charset="big5"><p>繁體中文</p>`, "text/html; charset=utf-8"},
		{"utf-8 as it is", "text/html; charset=utf-8", []byte("<p>中文</p>"), "<p>中文</p>", "text/html; charset=utf-8"},
		{"an image byte for byte", "image/png", png, string(png), "image/png"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := h.store.PutPage(t.Context(), &downloader.Page{URL: "http://p.test/", ContentType: tt.ct, Body: tt.body})
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			h.srv.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/pages/"+key, nil))
			if rec.Code != 200 || rec.Body.String() != tt.wantBody || rec.Header().Get("Content-Type") != tt.wantCT {
				t.Errorf("page: %d %q %q; want %q %q", rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"), tt.wantBody, tt.wantCT)
			}
			if got := rec.Header().Get("Page-Content-Type"); got != tt.ct {
				t.Errorf("Page-Content-Type = %q, want the one served, %q", got, tt.ct)
			}
			if rec.Header().Get("Content-Length") != strconv.Itoa(len(tt.wantBody)) {
				t.Errorf("Content-Length = %s, want %d", rec.Header().Get("Content-Length"), len(tt.wantBody))
			}
		})
	}
}

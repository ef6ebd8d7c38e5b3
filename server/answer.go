package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"unicode/utf8"
)

// answerChunkBytes is how much of the html or text is escaped at a time.
const answerChunkBytes = 32 << 10

// writeRenderAnswer writes entry B's 200 answer, the JSON of a, as writeJSON would
// (the same object, no HTML escaping), but with html and text escaped and written a chunk
// at a time: a body at the cap makes html and text near the cap, and JSON can make six
// bytes of one (a NUL is \u0000), so encoding the answer in one buffer cost several times
// the cap per request, past what the body cap promises (SPEC §3).
func writeRenderAnswer(w http.ResponseWriter, a renderResponse) {
	html, text := a.HTML, a.Text
	a.HTML, a.Text = "", ""
	head, err := json.Marshal(struct {
		renderResponse
		HTML string `json:"html,omitempty"`
		Text string `json:"text,omitempty"`
	}{renderResponse: a})
	if err != nil { // cannot happen: the summary's fields all encode
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "the answer could not be encoded"})
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, answerChunkBytes)
	bw.Write(head[:len(head)-1]) // without its closing brace
	bw.WriteString(`,"html":`)
	writeJSONString(bw, html)
	bw.WriteString(`,"text":`)
	writeJSONString(bw, text)
	bw.WriteString("}\n")
	bw.Flush()
}

// writeJSONString writes s as a JSON string, escaped as encoding/json escapes it without
// HTML escaping (invalid UTF-8 as U+FFFD), a chunk at a time. Chunks are cut at the start
// of a character, so that no character is split between two.
func writeJSONString(bw *bufio.Writer, s string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	bw.WriteByte('"')
	for len(s) > 0 {
		n := min(len(s), answerChunkBytes)
		for n < len(s) && n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		if n == 0 {
			n = min(len(s), answerChunkBytes) // no character start in reach: invalid bytes, each one U+FFFD
		}
		buf.Reset()
		enc.Encode(s[:n])
		b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		bw.Write(b[1 : len(b)-1])
		s = s[n:]
	}
	bw.WriteByte('"')
}

package fetch

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestReadUpTo: the body's buffer holds what was read, up to n, and its capacity never
// passes n, whatever the reader (an endless one, one byte at a time, one that fails).
func TestReadUpTo(t *testing.T) {
	const n = 10<<20 + 1
	text := strings.Repeat("0123456789", 10_000)
	boom := errors.New("boom")
	for _, tt := range []struct {
		name    string
		r       io.Reader
		n, hint int64
		want    int
		wantErr error
	}{
		{"endless, past the cap", zeros{}, n, 0, n, nil},
		{"endless, a hint past the cap", zeros{}, n, 1 << 30, n, nil},
		{"short", strings.NewReader(text), n, 0, len(text), nil},
		{"short, its length hinted", strings.NewReader(text), n, int64(len(text)) + 1, len(text), nil},
		{"a byte at a time", iotest.OneByteReader(strings.NewReader(text)), 1000, 0, 1000, nil},
		{"at the cap exactly", strings.NewReader(text), int64(len(text)), 0, len(text), nil},
		{"broken off", io.MultiReader(strings.NewReader(text), iotest.ErrReader(boom)), n, 0, len(text), boom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := readUpTo(tt.r, tt.n, tt.hint)
			if len(b) != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("%d bytes, error %v; want %d, %v", len(b), err, tt.want, tt.wantErr)
			}
			if int64(cap(b)) > tt.n {
				t.Errorf("capacity %d, past n %d", cap(b), tt.n)
			}
			if _, ok := tt.r.(zeros); !ok && len(b) > 0 && !bytes.Equal(b, []byte(text[:len(b)])) {
				t.Errorf("the bytes read are not the reader's")
			}
		})
	}
}

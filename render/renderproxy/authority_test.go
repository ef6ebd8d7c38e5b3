package renderproxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTLSAuthority: the CA is made once and read back the same; a directory with half
// a CA is refused; leaves are minted for the host asked (names and IP literals), verify
// under the CA, are cached, and no more than the bound are kept.
func TestTLSAuthority(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	a, err := LoadOrCreateAuthority(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadOrCreateAuthority(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.ca.SerialNumber.Cmp(b.ca.SerialNumber) != 0 {
		t.Errorf("a second load made a new CA")
	}
	if fi, err := os.Stat(filepath.Join(dir, caKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the CA key file: %v, mode %v, want 0600", err, fi.Mode().Perm())
	}
	roots := x509.NewCertPool()
	roots.AddCert(a.ca)
	for _, host := range []string{"hopb.example.com", "127.0.0.1"} {
		c, err := a.leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("%s: the leaf does not verify under the CA: %v", host, err)
		}
		if again, _ := a.leaf(strings.ToUpper(host)); again != c {
			t.Errorf("%s: minted again, want the cached leaf", host)
		}
	}
	if _, err := b.leaf("hopb.example.com"); err != nil {
		t.Fatal(err)
	}
	a.maxLeaves = 3
	for i := range 5 {
		if _, err := a.leaf(fmt.Sprintf("h%d.example.com", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.leafCount(); n != 3 {
		t.Errorf("%d leaves kept, want the bound 3", n)
	}

	half := t.TempDir()
	if err := os.WriteFile(filepath.Join(half, caCertFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateAuthority(half); err == nil {
		t.Errorf("a directory with a certificate and no key: want an error, not a new CA")
	}

	// The handshake: the name asked must be the CONNECT's host.
	cfg := a.serverConfig("hopb.example.com:443")
	if _, err := cfg.GetCertificate(&tls.ClientHelloInfo{ServerName: "other.example.com"}); err == nil {
		t.Errorf("a TLS name other than the CONNECT's host got a certificate")
	}
	if c, err := cfg.GetCertificate(&tls.ClientHelloInfo{}); err != nil || c.Leaf.DNSNames[0] != "hopb.example.com" {
		t.Errorf("no SNI: %v, want the CONNECT host's certificate", err)
	}
}

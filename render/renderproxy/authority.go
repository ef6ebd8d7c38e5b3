package renderproxy

import (
	"container/list"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// On Obscura's profile the guard proxy can terminate TLS (render.Config.GuardProxyCADir): a CONNECT is
// answered by us, the server's TLS ends at a certificate we mint for the host under a CA
// of our own that the server is told to trust (Obscura reads SSL_CERT_FILE:
// obscura-net client.rs configured_root_certificates), and each request inside is seen
// like a plain HTTP one: a main document to another host admitted as a hop, skipped types
// refused, the sub-request caps counted per request (SPEC §3). Our proxy is then the TLS
// client of the origin, with normal verification.

// The files of the CA in its directory: the certificate the server trusts, and its key,
// readable by us alone.
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
)

// maxLeafCount bounds the minted leaf certificates kept: one per host a render reached,
// the oldest dropped first (a dropped one is minted again when needed).
const maxLeafCount = 1024

// Validity of what we mint. Certificates are checked by the server against the wall
// clock, not the pool's: they are minted on time.Now.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 30 * 24 * time.Hour
	leafRenewal  = 24 * time.Hour // a cached leaf this close to its end is minted again
	clockSkew    = time.Hour      // NotBefore this far back: a server clock a little behind still takes it
)

// Authority is our CA: it mints, per host, the leaf certificate the guard proxy shows
// the server. Safe for concurrent use.
type Authority struct {
	dir     string
	ca      *x509.Certificate
	caKey   crypto.Signer
	leafKey *ecdsa.PrivateKey // one key for every leaf: minting is a signature, not a key generation

	maxLeaves int // maxLeafCount

	mu     sync.Mutex
	leaves map[string]*list.Element // host → its element in order
	order  *list.List               // of *mintedLeaf, newest first
}

type mintedLeaf struct {
	host string
	cert *tls.Certificate
}

// LoadOrCreateAuthority reads the CA in dir, or creates it there once (dir is made if
// missing). A directory with one of the two files and not the other is an error: a CA
// the server trusts must not be replaced silently.
func LoadOrCreateAuthority(dir string) (*Authority, error) {
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
		var err error
		if certPEM, keyPEM, err = createAuthority(dir); err != nil {
			return nil, err
		}
	case certErr != nil:
		return nil, fmt.Errorf("render guard proxy CA: %w", certErr)
	case keyErr != nil:
		return nil, fmt.Errorf("render guard proxy CA: %w", keyErr)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("render guard proxy CA in %s: %w", dir, err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("render guard proxy CA in %s: %w", dir, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok || !ca.IsCA {
		return nil, fmt.Errorf("render guard proxy CA in %s: not a CA certificate with a signing key", dir)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("render guard proxy CA: leaf key: %w", err)
	}
	return &Authority{dir: dir, ca: ca, caKey: signer, leafKey: leafKey, maxLeaves: maxLeafCount,
		leaves: make(map[string]*list.Element), order: list.New()}, nil
}

// createAuthority makes a new CA in dir and returns its PEM files. The key is written
// first, 0600, and neither file is overwritten if another process made them meanwhile.
func createAuthority(dir string) (certPEM, keyPEM []byte, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("render guard proxy CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("render guard proxy CA: key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "downloader render guard proxy CA", Organization: []string{"downloader"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("render guard proxy CA: certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("render guard proxy CA: key: %w", err)
	}
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writeNew(filepath.Join(dir, caKeyFile), keyPEM, 0o600); err != nil {
		return nil, nil, err
	}
	if err := writeNew(filepath.Join(dir, caCertFile), certPEM, 0o644); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("render guard proxy CA: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("render guard proxy CA: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("render guard proxy CA: %w", err)
	}
	return nil
}

func randomSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

// CertPath is the file the server must trust (SSL_CERT_FILE for Obscura).
func (a *Authority) CertPath() string { return filepath.Join(a.dir, caCertFile) }

// leaf returns the certificate for host (a name or an IP literal), minted on first use
// and cached, at most maxLeafCount of them.
func (a *Authority) leaf(host string) (*tls.Certificate, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return nil, errors.New("render guard proxy: no host to mint a certificate for")
	}
	now := time.Now()
	a.mu.Lock()
	if e, ok := a.leaves[host]; ok {
		m := e.Value.(*mintedLeaf)
		if now.Add(leafRenewal).Before(m.cert.Leaf.NotAfter) {
			a.order.MoveToFront(e)
			a.mu.Unlock()
			return m.cert, nil
		}
	}
	a.mu.Unlock()
	cert, err := a.mint(host, now)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.leaves[host]; ok {
		a.order.Remove(e)
	}
	a.leaves[host] = a.order.PushFront(&mintedLeaf{host: host, cert: cert})
	for a.order.Len() > a.maxLeaves {
		last := a.order.Back()
		a.order.Remove(last)
		delete(a.leaves, last.Value.(*mintedLeaf).host)
	}
	return cert, nil
}

func (a *Authority) mint(host string, now time.Time) (*tls.Certificate, error) {
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.ca, &a.leafKey.PublicKey, a.caKey)
	if err != nil {
		return nil, fmt.Errorf("render guard proxy: certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("render guard proxy: certificate for %s: %w", host, err)
	}
	// The chain carries our CA: a client that trusts it by its key (Chromium's
	// --ignore-certificate-errors-spki-list) finds it there.
	return &tls.Certificate{Certificate: [][]byte{der, a.ca.Raw}, PrivateKey: a.leafKey, Leaf: leaf}, nil
}

// Certificate is the CA's certificate.
func (a *Authority) Certificate() *x509.Certificate { return a.ca }

// leafCount is how many minted leaves are cached.
func (a *Authority) leafCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.order.Len()
}

// serverConfig is the TLS configuration of one terminated CONNECT to authority
// (host:port): the certificate is the one of the name the client asks for (SNI), which
// must be the CONNECT's host; HTTP/1.1 only, so that every request is one we read.
func (a *Authority) serverConfig(authority string) *tls.Config {
	host := authority
	if h, _, err := net.SplitHostPort(authority); err == nil {
		host = h
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := hello.ServerName
			if name == "" {
				name = host // an IP literal: no SNI
			}
			if !strings.EqualFold(strings.TrimSuffix(name, "."), strings.TrimSuffix(host, ".")) {
				return nil, fmt.Errorf("render guard proxy: TLS name %q is not the CONNECT's host %q", name, host)
			}
			return a.leaf(name)
		},
	}
}

// IsTLSError reports whether err is a TLS failure (the origin's certificate, an alert, not
// TLS at all): tls_failed (SPEC §4).
func IsTLSError(err error) bool {
	var certErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var alert tls.AlertError
	var recordErr tls.RecordHeaderError
	return errors.As(err, &certErr) || errors.As(err, &unknownAuthority) || errors.As(err, &hostErr) ||
		errors.As(err, &alert) || errors.As(err, &recordErr) || strings.Contains(err.Error(), "tls: ")
}

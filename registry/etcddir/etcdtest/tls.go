package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a TLS etcd: the CA that signed the
// server's and the client's certificates, and the client's pair (the
// server requires a client certificate: --client-cert-auth).
type TLSFiles struct {
	CA, ClientCert, ClientKey string
	// OtherCA signed nothing the server trusts or presents: a client that
	// trusts it, or presents OtherClientCert, must be refused.
	OtherCA, OtherClientCert, OtherClientKey string
	serverCert, serverKey                    string
}

// StartTLS is Start with client TLS: the members serve https only,
// require a client certificate signed by files.CA, and present a server
// certificate for 127.0.0.1 signed by it (peer traffic stays plain on
// loopback).
func StartTLS(t testing.TB, n int) (*Cluster, *TLSFiles) {
	t.Helper()
	f := makeTLSFiles(t, t.TempDir())
	return start(t, n, f), f
}

// ClientTLS is the client config for files' cluster (its CA, the
// client's certificate).
func (f *TLSFiles) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	b, err := os.ReadFile(f.CA)
	if err != nil || !pool.AppendCertsFromPEM(b) {
		t.Fatalf("etcdtest CA %s: %v", f.CA, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: pool}
}

func (f *TLSFiles) memberArgs() []string {
	return []string{"--cert-file", f.serverCert, "--key-file", f.serverKey, "--trusted-ca-file", f.CA, "--client-cert-auth"}
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func makeTLSFiles(t testing.TB, dir string) *TLSFiles {
	t.Helper()
	ca, other := newCA(t, dir, "ca"), newCA(t, dir, "other-ca")
	f := &TLSFiles{CA: filepath.Join(dir, "ca.pem"), OtherCA: filepath.Join(dir, "other-ca.pem")}
	f.serverCert, f.serverKey = ca.issue(t, dir, "server", x509.ExtKeyUsageServerAuth)
	f.ClientCert, f.ClientKey = ca.issue(t, dir, "client", x509.ExtKeyUsageClientAuth)
	f.OtherClientCert, f.OtherClientKey = other.issue(t, dir, "other-client", x509.ExtKeyUsageClientAuth)
	return f
}

// newCA writes a self-signed CA to dir/name.pem.
func newCA(t testing.TB, dir, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcdtest " + name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	return &testCA{cert: cert, key: key}
}

// issue writes a certificate for 127.0.0.1 (and "localhost") with usage
// to dir/name.pem and its key to dir/name.key.
func (ca *testCA) issue(t testing.TB, dir, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

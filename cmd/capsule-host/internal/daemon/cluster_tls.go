package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/capsule-host/capsule-host/host/config"
)

// Mutual TLS between nodes ([cluster] tls_ca, tls_cert, tls_key): every
// node presents a certificate signed by the operator's cluster CA whose
// DNS names include its node name, and accepts only peers the same CA
// signed. A dialling node checks that the answering certificate names
// the node it meant to reach (ServerName = node name), and the answering
// node checks that the caller's certificate names the node its
// X-Capsule-Node header claims. The cluster token is checked on top.

// peerTLS is the server and client side of the node-to-node TLS; nil
// without [cluster] tls_ca (plain HTTP, token only). Its files are read
// again when they change (looked at, at most once per peerReloadEvery,
// by a handshake): a rotated certificate, key or CA bundle serves new
// connections without a restart. A changed set that does not load or
// verify is refused (logged, counted) and the last good set stays, so a
// half-written rotation never takes the node off the cluster.
type peerTLS struct {
	paths  [3]string // tls_ca, tls_cert, tls_key
	node   string
	log    *slog.Logger
	server *tls.Config

	mu      sync.Mutex
	cur     peerFiles
	stamp   [3]fileStamp
	checked time.Time
	refused uint64 // changed sets refused
}

// peerReloadEvery bounds how often a handshake looks at the files.
const peerReloadEvery = time.Second

// peerFiles is one loaded and verified set.
type peerFiles struct {
	pool *x509.CertPool
	cert tls.Certificate
}

func loadPeerTLS(cc config.Cluster, node string, lg *slog.Logger) (*peerTLS, error) {
	if cc.TLSCA == "" {
		return nil, nil
	}
	t := &peerTLS{paths: [3]string{cc.TLSCA, cc.TLSCert, cc.TLSKey}, node: node, log: lg}
	t.stamp = t.stamps()
	f, err := t.read()
	if err != nil {
		return nil, err
	}
	t.cur, t.checked = f, time.Now()
	t.server = &tls.Config{MinVersion: tls.VersionTLS13, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		f := t.current()
		return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{f.cert}, ClientCAs: f.pool, ClientAuth: tls.RequireAndVerifyClientCert}, nil
	}}
	return t, nil
}

// read loads and checks the files: the certificate names this node and
// the CA signed it (a set peers would refuse is never used).
func (t *peerTLS) read() (peerFiles, error) {
	ca, certFile, keyFile := t.paths[0], t.paths[1], t.paths[2]
	pem, err := os.ReadFile(ca)
	if err != nil {
		return peerFiles{}, fmt.Errorf("cluster tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return peerFiles{}, fmt.Errorf("cluster tls_ca %s: no PEM certificate in it", ca)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return peerFiles{}, fmt.Errorf("cluster tls_cert/tls_key: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return peerFiles{}, fmt.Errorf("cluster tls_cert %s: %w", certFile, err)
	}
	if !slices.Contains(leaf.DNSNames, t.node) {
		return peerFiles{}, fmt.Errorf("cluster tls_cert %s names %v, not this node %q: peers would refuse it", certFile, leaf.DNSNames, t.node)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return peerFiles{}, fmt.Errorf("cluster tls_cert %s is not signed by tls_ca %s: %w", certFile, ca, err)
	}
	return peerFiles{pool: pool, cert: cert}, nil
}

// stamps is the files' sizes and modification times (watch.go's
// statFile: zero for one that cannot be read, a rename in progress).
func (t *peerTLS) stamps() (st [3]fileStamp) {
	for i, p := range t.paths {
		st[i] = statFile(p)
	}
	return st
}

// current is the set in use, re-read first when the files changed.
func (t *peerTLS) current() peerFiles {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.checked) < peerReloadEvery {
		return t.cur
	}
	t.checked = time.Now()
	st := t.stamps()
	if st == t.stamp {
		return t.cur
	}
	t.stamp = st // a broken set is retried when it changes again, not every second
	f, err := t.read()
	if err != nil {
		t.refused++
		t.log.Warn("cluster tls: the changed certificate files were refused; the previous ones stay in use", "err", err, "refused_total", t.refused)
		return t.cur
	}
	t.cur = f
	t.log.Info("cluster tls: certificate files reloaded (new connections use them)", "cert", t.paths[1])
	return f
}

// loadEtcdTLS is the etcd client's TLS ([cluster] etcd_ca, and
// etcd_cert/etcd_key for etcd's --client-cert-auth); nil without
// etcd_ca. Only the given CA is trusted: an etcd cluster's CA is the
// operator's own, never a public one.
func loadEtcdTLS(cc config.Cluster) (*tls.Config, error) {
	if cc.EtcdCA == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(cc.EtcdCA)
	if err != nil {
		return nil, fmt.Errorf("cluster etcd_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("cluster etcd_ca %s: no PEM certificate in it", cc.EtcdCA)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	if cc.EtcdCert != "" {
		cert, err := tls.LoadX509KeyPair(cc.EtcdCert, cc.EtcdKey)
		if err != nil {
			return nil, fmt.Errorf("cluster etcd_cert/etcd_key: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// clientFor is the client config for dialling node (its name checked),
// with the current set.
func (t *peerTLS) clientFor(node string) *tls.Config {
	f := t.current()
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{f.cert}, RootCAs: f.pool, ServerName: node}
}

// peerNamed reports whether the caller's verified certificate names
// node (the X-Capsule-Node it claims); true without TLS.
func peerNamed(st *tls.ConnectionState, node string) bool {
	if st == nil {
		return true
	}
	return len(st.PeerCertificates) > 0 && slices.Contains(st.PeerCertificates[0].DNSNames, node)
}

package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"

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
// without [cluster] tls_ca (plain HTTP, token only).
type peerTLS struct {
	server *tls.Config
	client *tls.Config
}

func loadPeerTLS(cc config.Cluster, node string) (*peerTLS, error) {
	if cc.TLSCA == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(cc.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("cluster tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("cluster tls_ca %s: no PEM certificate in it", cc.TLSCA)
	}
	cert, err := tls.LoadX509KeyPair(cc.TLSCert, cc.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("cluster tls_cert/tls_key: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("cluster tls_cert %s: %w", cc.TLSCert, err)
	}
	if !slices.Contains(leaf.DNSNames, node) {
		return nil, fmt.Errorf("cluster tls_cert %s names %v, not this node %q: peers would refuse it", cc.TLSCert, leaf.DNSNames, node)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("cluster tls_cert %s is not signed by tls_ca %s: %w", cc.TLSCert, cc.TLSCA, err)
	}
	return &peerTLS{
		server: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert},
		client: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool},
	}, nil
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

// clientFor is the client config for dialling node (its name checked).
func (t *peerTLS) clientFor(node string) *tls.Config {
	c := t.client.Clone()
	c.ServerName = node
	return c
}

// peerNamed reports whether the caller's verified certificate names
// node (the X-Capsule-Node it claims); true without TLS.
func peerNamed(st *tls.ConnectionState, node string) bool {
	if st == nil {
		return true
	}
	return len(st.PeerCertificates) > 0 && slices.Contains(st.PeerCertificates[0].DNSNames, node)
}

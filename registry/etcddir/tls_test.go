package etcddir

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/registry/etcddir/etcdtest"
)

// TestEtcdTLS: against a real etcd serving https only and requiring a
// client certificate (--client-cert-auth), a node with the cluster's CA
// and a client certificate it signed joins and reserves; without a
// client certificate, with a certificate of another CA, trusting another
// CA, or without TLS, Open fails with ErrUnavailable (never a hang or a
// plain-text fallback).
func TestEtcdTLS(t *testing.T) {
	c, f := etcdtest.StartTLS(t, 1)
	good := f.ClientTLS(t)
	pool := func(file string) *x509.CertPool {
		p := x509.NewCertPool()
		b, err := os.ReadFile(file)
		if err != nil || !p.AppendCertsFromPEM(b) {
			t.Fatalf("CA %s: %v", file, err)
		}
		return p
	}
	other, err := tls.LoadX509KeyPair(f.OtherClientCert, f.OtherClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tls  *tls.Config
		ok   bool
		why  string // what the refusal must say of the handshake
	}{
		{"CA and client certificate", good, true, ""},
		{"no client certificate", &tls.Config{RootCAs: good.RootCAs}, false, "bad certificate"},
		{"client certificate of another CA", &tls.Config{RootCAs: good.RootCAs, Certificates: []tls.Certificate{other}}, false, "bad certificate"},
		{"trusting another CA", &tls.Config{RootCAs: pool(f.OtherCA), Certificates: good.Certificates}, false, "unknown authority"},
		{"no TLS", nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Open(etcdtest.Context(t, 30*time.Second), Config{Endpoints: c.Endpoints(), TLS: tc.tls, Prefix: "/t/tls/", Node: "n", Address: "127.0.0.1:1", Capacity: 8, TTL: 5 * time.Second})
			if !tc.ok {
				if err == nil {
					d.Close()
					t.Fatal("joined etcd, want refused")
				}
				if !errors.Is(err, registry.ErrUnavailable) || !strings.Contains(err.Error(), tc.why) {
					t.Fatalf("%v, want ErrUnavailable saying %q", err, tc.why)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				d.Revoke(etcdtest.Context(t, 10*time.Second))
				d.Close()
			}()
			ctx := etcdtest.Context(t, 20*time.Second)
			if err := d.Reserve(ctx, res(true)); err != nil {
				t.Fatalf("reserve over TLS: %v", err)
			}
			if ns, err := d.Nodes(ctx); err != nil || len(ns) != 1 || ns[0].Name != "n" {
				t.Fatalf("nodes over TLS: %+v %v", ns, err)
			}
			if err := d.Health(ctx); err != nil {
				t.Fatalf("health over TLS: %v", err)
			}
		})
	}
}

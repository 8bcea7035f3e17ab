package etcddir

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// probeBound bounds the TLS probe of a failed Open.
const probeBound = 2 * time.Second

// explainTLS adds to a failed Open why TLS to etcd failed, when it did:
// the gRPC client only reports a deadline, and an operator with a wrong
// CA or client certificate needs the handshake's own error. It dials the
// first endpoint with the same config and reads once: a server that
// refuses the client certificate says so in an alert after the
// handshake (TLS 1.3), one that accepts it waits for the client's
// preface (the read times out: TLS is fine, err is left as it was).
func explainTLS(ctx context.Context, cfg *tls.Config, endpoints []string, err error) error {
	if cfg == nil || len(endpoints) == 0 {
		return err
	}
	_, host, _ := strings.Cut(endpoints[0], "://")
	ctx, cancel := context.WithTimeout(ctx, probeBound)
	defer cancel()
	c := cfg.Clone()
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(host)
	}
	conn, derr := (&tls.Dialer{Config: c}).DialContext(ctx, "tcp", host)
	if derr == nil {
		defer conn.Close()
		conn.SetReadDeadline(time.Now().Add(probeBound / 2))
		_, derr = conn.Read(make([]byte, 1))
		if errors.Is(derr, os.ErrDeadlineExceeded) {
			return err
		}
	}
	var ne net.Error
	if errors.As(derr, &ne) && ne.Timeout() {
		return err
	}
	return fmt.Errorf("%w (TLS to etcd %s: %v)", err, host, derr)
}
